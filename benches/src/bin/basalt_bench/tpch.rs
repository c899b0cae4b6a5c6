//! The TPC-H suite (`--suite tpch --sf N`): the eight tables generated at scale factor N by
//! the `tpchgen-arrow` crate (the reference `dbgen`'s data), written to Parquet and loaded
//! into each engine's own storage as a new user would (`CREATE TABLE … AS SELECT * FROM
//! read_parquet(…)`; SQLite, which cannot read Parquet, gets the same rows through one
//! prepared `INSERT` in one transaction, into tables with their primary keys), then the 22
//! queries ([`basalt_benches::tpch`]), each cross-checked between engines.
//!
//! Results agree when row counts, text values and per-column sums agree, each value within
//! 10⁻⁶ ([`Check::Near`]): engines round decimal averages and quotients to different scales.

use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch, RecordBatchReader};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema};
use arrow::error::ArrowError;
use basalt_benches::check::Check;
use basalt_benches::tpch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator,
    PartSuppGenerator, RegionGenerator, SupplierGenerator,
};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow,
    SupplierArrow,
};

use crate::engines::{Engine, Kind, Out, P, Res};
use crate::metrics::{Group, Metric, Mode, Work};

/// The tables, smallest first.
pub const TABLES: [&str; 8] =
    ["region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem"];

/// Rows per generated batch (and per Parquet row group).
const BATCH: usize = 65_536;

fn batches(table: &str, sf: f64) -> Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>>> {
    match table {
        "region" => {
            Box::new(RegionArrow::new(RegionGenerator::new(sf, 1, 1)).with_batch_size(BATCH))
        }
        "nation" => {
            Box::new(NationArrow::new(NationGenerator::new(sf, 1, 1)).with_batch_size(BATCH))
        }
        "supplier" => {
            Box::new(SupplierArrow::new(SupplierGenerator::new(sf, 1, 1)).with_batch_size(BATCH))
        }
        "customer" => {
            Box::new(CustomerArrow::new(CustomerGenerator::new(sf, 1, 1)).with_batch_size(BATCH))
        }
        "part" => Box::new(PartArrow::new(PartGenerator::new(sf, 1, 1)).with_batch_size(BATCH)),
        "partsupp" => {
            Box::new(PartSuppArrow::new(PartSuppGenerator::new(sf, 1, 1)).with_batch_size(BATCH))
        }
        "orders" => Box::new(OrderArrow::new(OrderGenerator::new(sf, 1, 1)).with_batch_size(BATCH)),
        _ => Box::new(LineItemArrow::new(LineItemGenerator::new(sf, 1, 1)).with_batch_size(BATCH)),
    }
}

/// `b` with string views as plain strings (the type every engine reads back the same way).
fn plain_strings(b: RecordBatch) -> Res<RecordBatch> {
    let fields: Vec<Field> = b
        .schema()
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Utf8View => f.as_ref().clone().with_data_type(DataType::Utf8),
            _ => f.as_ref().clone(),
        })
        .collect();
    let cols = b
        .columns()
        .iter()
        .zip(&fields)
        .map(|(c, f)| cast(c, f.data_type()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).map_err(|e| e.to_string())
}

/// The Parquet file of `table` in `dir`.
pub fn file(dir: &Path, table: &str) -> String {
    dir.join(format!("{table}.parquet")).display().to_string()
}

/// Writes every table at scale factor `sf` to `dir/<table>.parquet`; returns the row counts.
pub fn generate(sf: f64, dir: &Path) -> Res<Vec<(&'static str, usize)>> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let mut counts = Vec::new();
    for t in TABLES {
        let path = std::path::PathBuf::from(file(dir, t));
        let mut writer = None;
        let mut rows = 0;
        for b in batches(t, sf) {
            let b = plain_strings(b.map_err(|e| e.to_string())?)?;
            rows += b.num_rows();
            let w = match &mut writer {
                Some(w) => w,
                None => writer.insert(crate::data::parquet_writer(&path, b.schema())?),
            };
            w.write(&b).map_err(|e| e.to_string())?;
        }
        writer
            .ok_or(format!("{t}: no rows at scale factor {sf}"))?
            .close()
            .map_err(|e| e.to_string())?;
        counts.push((t, rows));
    }
    Ok(counts)
}

/// The primary key of each table, declared in SQLite (whose plans for the correlated
/// queries need the key indexes; a SQLite user loading TPC-H declares them). Basalt and
/// DuckDB load with `CREATE TABLE … AS`, which declares none.
fn primary_key(table: &str) -> &'static str {
    match table {
        "region" => "r_regionkey",
        "nation" => "n_nationkey",
        "supplier" => "s_suppkey",
        "customer" => "c_custkey",
        "part" => "p_partkey",
        "partsupp" => "ps_partkey, ps_suppkey",
        "orders" => "o_orderkey",
        _ => "l_orderkey, l_linenumber",
    }
}

/// SQLite's column type for an Arrow type (decimals as REAL, dates as ISO text), and the
/// Arrow type its values are bound as.
fn sqlite_column(t: &DataType) -> (&'static str, DataType) {
    match t {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            ("INTEGER", DataType::Int64)
        }
        DataType::Decimal128(..) | DataType::Float32 | DataType::Float64 => {
            ("REAL", DataType::Float64)
        }
        _ => ("TEXT", DataType::Utf8),
    }
}

/// Loads one table from its Parquet file into SQLite: the table as the file's schema with
/// `primary_key` (column names as SQL), every row through one prepared `INSERT`, in one
/// transaction. Used when SQLite is a peer of a suite loaded from Parquet (it cannot read it).
pub fn sqlite_load(e: &mut dyn Engine, table: &str, path: &str, primary_key: &str) -> Res<()> {
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(f)
        .and_then(|b| b.with_batch_size(BATCH).build())
        .map_err(|e| e.to_string())?;
    let schema = reader.schema();
    let cols: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| format!("\"{}\" {}", f.name(), sqlite_column(f.data_type()).0))
        .collect();
    e.batch(&format!("CREATE TABLE {table} ({}, PRIMARY KEY ({}))", cols.join(", "), primary_key))?;
    let marks = vec!["?"; schema.fields().len()].join(", ");
    let insert = format!("INSERT INTO {table} VALUES ({marks})");
    e.batch("BEGIN")?;
    for b in reader {
        let b = b.map_err(|e| e.to_string())?;
        if b.columns().iter().any(|c| c.null_count() > 0) {
            return Err(format!("{table}: NULLs in generated data"));
        }
        let cols: Vec<Arc<dyn Array>> = b
            .columns()
            .iter()
            .map(|c| cast(c, &sqlite_column(c.data_type()).1))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        for r in 0..b.num_rows() {
            let row: Vec<P> = cols
                .iter()
                .map(|a| match a.data_type() {
                    DataType::Int64 => P::I(a.as_primitive::<Int64Type>().value(r)),
                    DataType::Float64 => P::F(a.as_primitive::<Float64Type>().value(r)),
                    _ => P::S(a.as_string::<i32>().value(r).to_string()),
                })
                .collect();
            e.execute(&insert, &row)?;
        }
    }
    e.batch("COMMIT")
}

/// The load (`TPCH-LOAD`, every table, timed once) and the 22 queries (`TPCH-Q01` …).
pub fn metrics(sf: f64, dir: &Path) -> Vec<Metric> {
    let files: Vec<(&'static str, String)> = TABLES.iter().map(|t| (*t, file(dir, t))).collect();
    let drop: Work = Rc::new(|e, _| {
        for t in TABLES {
            e.batch(&format!("DROP TABLE IF EXISTS {t}"))?;
        }
        Ok(Out::Unit)
    });
    let load = Box::new(move |k: Kind| -> Result<Work, String> {
        let files = files.clone();
        Ok(Rc::new(move |e: &mut dyn Engine, _| {
            for (t, f) in &files {
                match k {
                    Kind::Sqlite => sqlite_load(e, t, f, primary_key(t))?,
                    _ => {
                        e.batch(&format!("CREATE TABLE {t} AS SELECT * FROM read_parquet('{f}')"))?
                    }
                }
            }
            Ok(Out::Unit)
        }) as Work)
    });
    let mut out = vec![
        Metric::load("TPCH-LOAD", "Load the 8 tables from Parquet", drop, load),
        Metric::open("TPCH-OPEN"),
    ];
    for n in 1..=22 {
        let sql = tpch::query(n, sf);
        out.push(Metric {
            id: format!("TPCH-Q{n:02}"),
            name: format!("Q{n} {}", tpch::TITLES[n - 1]),
            group: Group::Tpch,
            mode: Mode::Plain,
            check: Check::Near,
            ranked: true,
            pre: None,
            setup: None,
            work: Box::new(move |k: Kind| -> Result<Work, String> {
                let text = if k == Kind::Sqlite { tpch::for_sqlite(&sql) } else { sql.clone() };
                Ok(Rc::new(move |e: &mut dyn Engine, _| e.query(&text, &[])) as Work)
            }),
        });
    }
    out
}
