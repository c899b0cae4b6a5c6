//! The metric catalogue: every tabular metric of `benches/README.md` (*Metrics*) (71 OLAP + 32 OLTP), the
//! transaction and durability diagnostics of §4, each as work per engine.
//!
//! Rules kept here (`benches/README.md`, *Fairness rules*): the same SQL text for every engine wherever the
//! engines share a dialect; constants and ids rotate between calls where the metric allows
//! (call 0, the checked call, uses the workload's literal constant); results are
//! materialised in full; where an engine cannot do the operation the metric is N/A for it,
//! never an unequal substitute. Basalt's direct-API metrics (the workload's `count_rows`,
//! `retrieve`, `replace`, `delete`, `store`, `list_tables` calls) are labelled as such.

use std::rc::Rc;

use basalt_benches::check::Check;
use basalt_benches::{CATEGORIES, CITIES};

use crate::data::Dataset;
use crate::engines::{BenchRow, Engine, Kind, Out, P, Params, Res};

/// How a metric is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Warm-ups, then timed iterations; the median iteration.
    Plain,
    /// As `Plain`, with the database reopened (untimed) before every call.
    Cold,
    /// A per-call median of a read: calls are batched so one sample takes ≥ 2 ms.
    Micro,
    /// A per-call median of a write: a fixed number of calls per sample on every engine, so
    /// every engine's table goes through the same changes.
    MicroWrite,
    /// An untimed setup before every timed call; the median call.
    Setup,
    /// Timed once.
    Once,
}

impl Mode {
    /// Short label for the report.
    pub fn label(self) -> &'static str {
        match self {
            Mode::Plain => "median",
            Mode::Cold => "cold",
            Mode::Micro => "per-call",
            Mode::MicroWrite => "per-call (write)",
            Mode::Setup => "setup+median",
            Mode::Once => "once",
        }
    }
}

/// Scoreboard groups of the harness issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    /// Bulk loads.
    Load,
    /// Point reads and small reads.
    PointReads,
    /// Filters and scans.
    Filtering,
    /// Aggregation.
    Aggregation,
    /// ORDER BY, LIMIT, windows.
    OrderingWindow,
    /// Joins.
    Joins,
    /// UNION / INTERSECT / EXCEPT.
    SetOps,
    /// Subqueries, views, CTEs.
    Subqueries,
    /// Scalar expressions.
    Expressions,
    /// Queries over CSV / JSON files.
    FileScans,
    /// Inserts, updates, deletes.
    Dml,
    /// Full-text search.
    Search,
    /// DDL and catalog.
    TableOps,
    /// Vector top-k.
    Vector,
    /// §4 diagnostics (not ranked).
    Diagnostics,
}

impl Group {
    /// Name for the report.
    pub fn name(self) -> &'static str {
        match self {
            Group::Load => "load",
            Group::PointReads => "point reads",
            Group::Filtering => "filtering",
            Group::Aggregation => "aggregation",
            Group::OrderingWindow => "ordering/window",
            Group::Joins => "joins",
            Group::SetOps => "set ops",
            Group::Subqueries => "subqueries",
            Group::Expressions => "expressions",
            Group::FileScans => "file scans",
            Group::Dml => "DML",
            Group::Search => "search",
            Group::TableOps => "table ops",
            Group::Vector => "vector",
            Group::Diagnostics => "diagnostics",
        }
    }
}

/// Work on one engine for call number `call`.
pub type Work = Rc<dyn Fn(&mut dyn Engine, usize) -> Res<Out>>;

/// One metric.
pub struct Metric {
    /// `OLAP-11`, `OLTP-2`, `DIAG-…`.
    pub id: String,
    /// Title.
    pub name: String,
    /// Group.
    pub group: Group,
    /// Timing mode.
    pub mode: Mode,
    /// What of the results must agree between engines.
    pub check: Check,
    /// Whether it counts in the scoreboard.
    pub ranked: bool,
    /// Run once before the metric on each engine (untimed).
    pub pre: Option<Work>,
    /// Run before every timed call (untimed; `Mode::Setup`).
    pub setup: Option<Work>,
    /// The work per engine, or why the engine cannot do it.
    pub work: Box<dyn Fn(Kind) -> Result<Work, String>>,
}

/// Inputs the catalogue needs.
pub struct Ctx {
    /// Rows of the loaded table.
    pub rows: usize,
    /// The dataset (for bulk loads and replace-by-id).
    pub data: Rc<Dataset>,
    /// Where the CSV / JSON / Parquet files are.
    pub files: std::path::PathBuf,
    /// Whether DuckDB's fts extension is available.
    pub duck_fts: bool,
}

fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The id for call `call`: 5000 (the workload's) for call 0, then spread over the table.
pub fn rot_id(rows: usize, call: usize) -> i64 {
    let n = rows.max(1) as u64;
    if call == 0 { 5000.min(n) as i64 } else { (1 + mix(call as u64) % n) as i64 }
}

fn rot_ids(rows: usize, call: usize, k: usize) -> Vec<P> {
    (0..k).map(|j| P::I(rot_id(rows, call * 1000 + j + usize::from(call == 0)))).collect()
}

/// A name of an existing row: the workload's `user_5000` for call 0, then the name of the
/// row `rot_id` picks.
fn rot_name(rows: usize, call: usize) -> P {
    let i =
        if call == 0 { 5000.min(rows.saturating_sub(1)) as i64 } else { rot_id(rows, call) - 1 };
    P::S(format!("user_{i}"))
}

fn rot_city(call: usize) -> P {
    P::S(CITIES[call % CITIES.len()].into())
}

fn rot_cat(call: usize) -> P {
    P::S(CATEGORIES[call % CATEGORIES.len()].into())
}

fn missing_id(rows: usize, call: usize) -> i64 {
    rows as i64 + 100_000_000 + call as i64
}

fn placeholders(from: usize, k: usize) -> String {
    (from..from + k).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

/// Work: a query without parameters.
fn q(sql: &str) -> Work {
    let sql = sql.to_string();
    Rc::new(move |e, _| e.query(&sql, &[]))
}

/// Work: a query with parameters per call.
fn qp(sql: &str, params: impl Fn(usize) -> Vec<P> + 'static) -> Work {
    let sql = sql.to_string();
    Rc::new(move |e, call| e.query(&sql, &params(call)))
}

/// Work: a statement with parameters per call; its affected-row count is checked.
fn xp(sql: &str, params: impl Fn(usize) -> Vec<P> + 'static) -> Work {
    let sql = sql.to_string();
    Rc::new(move |e, call| e.execute(&sql, &params(call)).map(Out::Count))
}

/// Work: statements run unprepared (DDL).
fn ddl(sql: impl Fn(Kind) -> String + 'static) -> Work {
    Rc::new(move |e, _| e.batch(&sql(e.kind())).map(|_| Out::Unit))
}

fn all(w: Work) -> Box<dyn Fn(Kind) -> Result<Work, String>> {
    Box::new(move |_| Ok(w.clone()))
}

fn basalt_or(b: Work, other: Work) -> Box<dyn Fn(Kind) -> Result<Work, String>> {
    Box::new(move |k| Ok(if k == Kind::Basalt { b.clone() } else { other.clone() }))
}

fn basalt_of(e: &mut dyn Engine) -> Res<&mut crate::engines::BasaltEngine> {
    e.basalt().ok_or_else(|| "not Basalt".to_string())
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

struct Builder {
    out: Vec<Metric>,
}

impl Builder {
    fn add(
        &mut self,
        id: &str,
        name: &str,
        group: Group,
        mode: Mode,
        check: Check,
        work: Box<dyn Fn(Kind) -> Result<Work, String>>,
    ) -> &mut Metric {
        self.out.push(Metric {
            id: id.to_string(),
            name: name.to_string(),
            group,
            mode,
            check,
            ranked: true,
            pre: None,
            setup: None,
            work,
        });
        self.out.last_mut().expect("just pushed")
    }
    fn sql(&mut self, id: &str, name: &str, group: Group, check: Check, sql: &str) -> &mut Metric {
        self.add(id, name, group, Mode::Plain, check, all(q(sql)))
    }
}

fn oltp_row(name: &str, age: i64, score: f64, city: &'static str, cat: &'static str) -> BenchRow {
    BenchRow { name: name.to_string(), age, score, city, category: cat }
}

/// Every tabular metric of §2, in the order they run: the bulk load, OLAP 1–71, OLTP 2–32.
pub fn tabular(ctx: &Ctx) -> Vec<Metric> {
    use Check::{Cols, Full, Rows};
    use Group as G;
    let n = ctx.rows;
    let mut b = Builder { out: Vec::new() };

    // ---- OLTP 1: the bulk load (creates the tables; everything else reads them).
    let data = ctx.data.clone();
    let load: Work = Rc::new(move |e, _| match e.kind() {
        Kind::Basalt => {
            let t = basalt_of(e)?.bench()?;
            t.insert_batches(&data.batches).map(|_| Out::Unit).map_err(err)
        }
        _ => e.insert_many(&data.rows).map(|_| Out::Unit),
    });
    let m = b.add(
        "OLTP-1",
        "Bulk insert (N rows; bulk path)",
        G::Load,
        Mode::Once,
        Check::None,
        all(load),
    );
    m.pre = Some(Rc::new(|e, _| crate::engines::create_schema(e).map(|_| Out::Unit)));

    // ---- OLAP.
    b.sql("OLAP-1", "COUNT(*)", G::Aggregation, Full, "SELECT COUNT(*) FROM bench");
    b.add(
        "OLAP-2",
        "SELECT * LIMIT 100 (cold reopen)",
        G::PointReads,
        Mode::Cold,
        Rows,
        all(q("SELECT * FROM bench LIMIT 100")),
    );
    b.sql(
        "OLAP-3",
        "SELECT * LIMIT 100 (warm)",
        G::PointReads,
        Rows,
        "SELECT * FROM bench LIMIT 100",
    );
    b.add(
        "OLAP-4",
        "SELECT * LIMIT 10K (cold reopen)",
        G::PointReads,
        Mode::Cold,
        Rows,
        all(q("SELECT * FROM bench LIMIT 10000")),
    );
    b.sql(
        "OLAP-5",
        "SELECT * LIMIT 10K (warm)",
        G::PointReads,
        Rows,
        "SELECT * FROM bench LIMIT 10000",
    );
    b.sql(
        "OLAP-6",
        "Projection full scan (3 cols)",
        G::Filtering,
        Full,
        "SELECT name, age, city FROM bench",
    );
    b.sql(
        "OLAP-7",
        "Filtered LIMIT 100 (age>30)",
        G::PointReads,
        Rows,
        "SELECT * FROM bench WHERE age > 30 LIMIT 100",
    );
    b.sql(
        "OLAP-8",
        "LIMIT 100 OFFSET 10K",
        G::PointReads,
        Rows,
        "SELECT * FROM bench LIMIT 100 OFFSET 10000",
    );
    b.add(
        "OLAP-9",
        "Filter name = 'user_5000' (rotated)",
        G::Filtering,
        Mode::Plain,
        Full,
        all(qp("SELECT * FROM bench WHERE name = $1", move |c| vec![rot_name(n, c)])),
    );
    b.sql(
        "OLAP-10",
        "Filter age BETWEEN 25 AND 35",
        G::Filtering,
        Full,
        "SELECT * FROM bench WHERE age BETWEEN 25 AND 35",
    );
    b.sql(
        "OLAP-11",
        "GROUP BY city (10 groups)",
        G::Aggregation,
        Full,
        "SELECT city, COUNT(*), AVG(score) FROM bench GROUP BY city",
    );
    b.sql(
        "OLAP-12",
        "GROUP BY category (10 groups)",
        G::Aggregation,
        Full,
        "SELECT category, COUNT(*), AVG(score) FROM bench GROUP BY category",
    );
    b.sql(
        "OLAP-13",
        "GROUP BY city ORDER BY count LIMIT 5",
        G::Aggregation,
        Cols(&[1]),
        "SELECT city, COUNT(*) AS cnt FROM bench GROUP BY city ORDER BY cnt DESC LIMIT 5",
    );
    b.sql(
        "OLAP-14",
        "GROUP BY category ORDER BY count LIMIT 5",
        G::Aggregation,
        Cols(&[1]),
        "SELECT category, COUNT(*) AS cnt FROM bench GROUP BY category ORDER BY cnt DESC LIMIT 5",
    );
    b.sql(
        "OLAP-15",
        "GROUP BY city + HAVING",
        G::Aggregation,
        Full,
        "SELECT city, COUNT(*) AS cnt, AVG(score) FROM bench GROUP BY city HAVING COUNT(*) > 1000",
    );
    b.sql("OLAP-16", "GROUP BY category + HAVING", G::Aggregation, Full, "SELECT category, COUNT(*) AS cnt, AVG(score) FROM bench GROUP BY category HAVING COUNT(*) > 1000");
    let m = b.add(
        "OLAP-17",
        "Persistent VIEW select (view recreated before each call)",
        G::Subqueries,
        Mode::Setup,
        Cols(&[1]),
        all(q("SELECT city, cnt FROM bench_view WHERE cnt > 0 ORDER BY cnt DESC LIMIT 5")),
    );
    m.setup = Some(ddl(|_| {
        "DROP VIEW IF EXISTS bench_view; CREATE VIEW bench_view AS SELECT city, COUNT(*) AS cnt, AVG(score) AS avg_score FROM bench GROUP BY city".into()
    }));
    b.sql(
        "OLAP-18",
        "ORDER BY score DESC LIMIT 100",
        G::OrderingWindow,
        Cols(&[2]),
        "SELECT * FROM bench ORDER BY score DESC LIMIT 100",
    );
    b.sql(
        "OLAP-19",
        "ORDER BY score ASC LIMIT 100",
        G::OrderingWindow,
        Cols(&[2]),
        "SELECT * FROM bench ORDER BY score ASC LIMIT 100",
    );
    b.sql(
        "OLAP-20",
        "Aggregation (5 funcs)",
        G::Aggregation,
        Full,
        "SELECT COUNT(*), AVG(age), SUM(score), MIN(age), MAX(age) FROM bench",
    );
    b.add(
        "OLAP-21",
        "Filtered aggregation (category; rotated)",
        G::Aggregation,
        Mode::Plain,
        Full,
        all(qp("SELECT COUNT(*), AVG(score), MAX(score) FROM bench WHERE category = $1", |c| {
            vec![rot_cat(c)]
        })),
    );
    b.add(
        "OLAP-22",
        "Filtered aggregation (city; rotated)",
        G::Aggregation,
        Mode::Plain,
        Full,
        all(qp("SELECT COUNT(*), AVG(score), MAX(score) FROM bench WHERE city = $1", |c| {
            vec![rot_city(c)]
        })),
    );
    b.add(
        "OLAP-23",
        "COUNT WHERE category (rotated)",
        G::Aggregation,
        Mode::Micro,
        Full,
        all(qp("SELECT COUNT(*) FROM bench WHERE category = $1", |c| vec![rot_cat(c)])),
    );
    b.sql("OLAP-24", "Filter + GROUP BY + ORDER BY", G::Aggregation, Full, "SELECT city, AVG(score) AS avg_s FROM bench WHERE age BETWEEN 25 AND 50 GROUP BY city ORDER BY avg_s DESC LIMIT 5");
    b.sql("OLAP-25", "SELECT * full scan", G::Filtering, Full, "SELECT * FROM bench");
    b.sql(
        "OLAP-26",
        "GROUP BY city, category (100 groups)",
        G::Aggregation,
        Full,
        "SELECT city, category, COUNT(*), AVG(score) FROM bench GROUP BY city, category",
    );
    b.sql(
        "OLAP-27",
        "LIKE 'user_1%'",
        G::Filtering,
        Full,
        "SELECT * FROM bench WHERE name LIKE 'user_1%'",
    );
    b.sql(
        "OLAP-28",
        "age > 30 AND score > 50",
        G::Filtering,
        Full,
        "SELECT * FROM bench WHERE age > 30 AND score > 50.0",
    );
    b.sql(
        "OLAP-29",
        "ORDER BY city, score DESC LIMIT 100",
        G::OrderingWindow,
        Cols(&[2, 3]),
        "SELECT * FROM bench ORDER BY city ASC, score DESC LIMIT 100",
    );
    b.sql(
        "OLAP-30",
        "COUNT(DISTINCT city)",
        G::Aggregation,
        Full,
        "SELECT COUNT(DISTINCT city) FROM bench",
    );
    b.sql(
        "OLAP-31",
        "COUNT(DISTINCT category)",
        G::Aggregation,
        Full,
        "SELECT COUNT(DISTINCT category) FROM bench",
    );
    b.sql(
        "OLAP-32",
        "city IN (3 cities)",
        G::Filtering,
        Full,
        "SELECT * FROM bench WHERE city IN ('Beijing', 'Shanghai', 'Guangzhou')",
    );
    b.sql(
        "OLAP-33",
        "age IN (9 values)",
        G::Filtering,
        Full,
        "SELECT * FROM bench WHERE age IN (20, 25, 30, 35, 40, 45, 50, 55, 60)",
    );
    b.sql(
        "OLAP-34",
        "age = 25 OR city = 'Beijing'",
        G::Filtering,
        Full,
        "SELECT * FROM bench WHERE age = 25 OR city = 'Beijing'",
    );
    b.sql("OLAP-35", "Boolean filter + GROUP + HAVING + TopK", G::Aggregation, Full, "SELECT city, COUNT(*) AS n, AVG(score) AS av FROM bench WHERE (city IN ('Beijing', 'Shanghai', 'Guangzhou') OR age IN (33, 44, 55)) AND score >= 40 GROUP BY city HAVING COUNT(*) > 100 ORDER BY n DESC, city LIMIT 5");
    b.sql(
        "OLAP-36",
        "age = 20 OR 30 OR 40 OR 50",
        G::Filtering,
        Full,
        "SELECT * FROM bench WHERE age = 20 OR age = 30 OR age = 40 OR age = 50",
    );
    b.sql("OLAP-37", "ROW_NUMBER() PARTITION BY city LIMIT 1000", G::OrderingWindow, Rows, "SELECT name, city, score, ROW_NUMBER() OVER (PARTITION BY city ORDER BY score DESC) AS rn FROM bench LIMIT 1000");
    b.sql("OLAP-38", "JOIN + GROUP BY + ORDER BY LIMIT", G::Joins, Cols(&[1]), "SELECT b.city, COUNT(*) AS c FROM bench b JOIN meta m ON b.city = m.city GROUP BY b.city ORDER BY c DESC LIMIT 5");
    b.sql(
        "OLAP-39",
        "LEFT JOIN COUNT",
        G::Joins,
        Full,
        "SELECT COUNT(*) AS c FROM bench b LEFT JOIN meta m ON b.city = m.city",
    );
    b.sql("OLAP-40", "LEFT JOIN extra ON predicate", G::Joins, Full, "SELECT COUNT(*) AS c FROM bench b LEFT JOIN meta m ON b.city = m.city AND m.pop > 15000000");
    b.sql("OLAP-41", "FULL OUTER JOIN (bounded)", G::Joins, Rows, "SELECT b.city, m.pop FROM bench b FULL OUTER JOIN meta m ON b.city = m.city WHERE b.age < 25 LIMIT 1000");
    b.sql(
        "OLAP-42",
        "CROSS JOIN COUNT",
        G::Joins,
        Full,
        "SELECT COUNT(*) AS c FROM bench b CROSS JOIN meta m WHERE b.age < 20 AND m.pop > 0",
    );
    b.sql("OLAP-43", "UNION ALL (ordered)", G::SetOps, Full, "SELECT city FROM bench WHERE age = 25 UNION ALL SELECT city FROM bench WHERE age = 26 ORDER BY city LIMIT 100");
    b.sql("OLAP-44", "UNION DISTINCT (ordered)", G::SetOps, Full, "SELECT city FROM bench WHERE age = 25 UNION SELECT city FROM bench WHERE age = 26 ORDER BY city");
    b.sql("OLAP-45", "INTERSECT (ordered)", G::SetOps, Full, "SELECT city FROM bench WHERE age BETWEEN 20 AND 30 INTERSECT SELECT city FROM bench WHERE age BETWEEN 25 AND 35 ORDER BY city");
    b.sql("OLAP-46", "EXCEPT (ordered)", G::SetOps, Full, "SELECT city FROM bench WHERE age BETWEEN 20 AND 30 EXCEPT SELECT city FROM bench WHERE age BETWEEN 25 AND 35 ORDER BY city");
    b.sql("OLAP-47", "IN subquery COUNT", G::Subqueries, Full, "SELECT COUNT(*) AS c FROM bench WHERE city IN (SELECT city FROM meta WHERE pop > 15000000)");
    b.sql("OLAP-48", "EXISTS subquery COUNT", G::Subqueries, Full, "SELECT COUNT(*) AS c FROM bench b WHERE EXISTS (SELECT 1 FROM meta m WHERE m.city = b.city AND m.pop > 15000000)");
    b.sql("OLAP-49", "Derived table GROUP BY", G::Subqueries, Cols(&[1]), "SELECT city, cnt FROM (SELECT city, COUNT(*) AS cnt FROM bench GROUP BY city) d ORDER BY cnt DESC LIMIT 5");
    b.sql("OLAP-50", "CTE with AVG filter", G::Subqueries, Full, "WITH c AS (SELECT city, AVG(score) AS av FROM bench GROUP BY city) SELECT city FROM c WHERE av > 50 ORDER BY av DESC LIMIT 5");
    b.sql("OLAP-51", "CASE aggregate GROUP BY", G::Aggregation, Full, "SELECT city, COUNT(CASE WHEN age > 40 THEN 1 END) AS c FROM bench GROUP BY city ORDER BY city");
    b.sql("OLAP-52", "String functions", G::Expressions, Rows, "SELECT UPPER(city) AS u, LENGTH(name) AS ln, SUBSTR(name, 1, 5) AS sub, CONCAT(city, '-', category) AS cc, TRIM(category) AS tr FROM bench WHERE age BETWEEN 30 AND 40 LIMIT 1000");
    b.sql("OLAP-53", "Numeric functions", G::Expressions, Rows, "SELECT ROUND(score, 0) AS r, ABS(age - 40) AS a, FLOOR(score) AS f, CEIL(score) AS c, MOD(age, 7) AS m FROM bench WHERE age BETWEEN 30 AND 40 LIMIT 1000");
    b.sql("OLAP-54", "COALESCE/NULLIF filter", G::Expressions, Full, "SELECT COUNT(*) AS c FROM bench WHERE COALESCE(NULLIF(category, 'Books'), 'none') = 'Books'");
    b.sql("OLAP-55", "NOT BETWEEN AND NOT LIKE", G::Filtering, Full, "SELECT COUNT(*) AS c FROM bench WHERE age NOT BETWEEN 20 AND 40 AND name NOT LIKE 'user_5%'");
    b.sql(
        "OLAP-56",
        "Deep offset",
        G::OrderingWindow,
        Full,
        "SELECT name, age FROM bench ORDER BY age, name LIMIT 100 OFFSET 100000",
    );
    b.sql(
        "OLAP-57",
        "ORDER BY LENGTH(name) LIMIT 100",
        G::OrderingWindow,
        Rows,
        "SELECT name FROM bench ORDER BY LENGTH(name) DESC, age LIMIT 100",
    );
    b.sql("OLAP-58", "Window running SUM LIMIT 1000", G::OrderingWindow, Rows, "SELECT city, score, SUM(score) OVER (PARTITION BY city ORDER BY age) AS run FROM bench LIMIT 1000");
    b.sql("OLAP-59", "Window RANK LIMIT 1000", G::OrderingWindow, Rows, "SELECT city, RANK() OVER (PARTITION BY city ORDER BY score DESC) AS rk FROM bench LIMIT 1000");
    b.sql("OLAP-60", "Window LAG LIMIT 1000", G::OrderingWindow, Rows, "SELECT city, LAG(score) OVER (PARTITION BY city ORDER BY age) AS prev FROM bench LIMIT 1000");
    b.sql(
        "OLAP-61",
        "DISTINCT city, category",
        G::Aggregation,
        Full,
        "SELECT DISTINCT city, category FROM bench ORDER BY city, category",
    );
    b.sql("OLAP-62", "GROUP BY 2 cols + HAVING", G::Aggregation, Full, "SELECT city, category, COUNT(*) AS c FROM bench GROUP BY city, category HAVING COUNT(*) > 2000 ORDER BY city, category LIMIT 20");

    // File scans: Basalt read_csv / read_json, DuckDB read_csv_auto / read_json_auto; SQLite
    // cannot query files.
    let csv = ctx.files.join("bench.csv").display().to_string();
    let json = ctx.files.join("bench.jsonl").display().to_string();
    let file_metric = |b: &mut Builder, id: &str, name: &str, check: Check, sql: &str| {
        let basalt = sql
            .replace("{csv}", &format!("read_csv('{csv}')"))
            .replace("{json}", &format!("read_json('{json}')"));
        let duck = sql
            .replace("{csv}", &format!("read_csv_auto('{csv}')"))
            .replace("{json}", &format!("read_json_auto('{json}')"));
        b.add(
            id,
            name,
            G::FileScans,
            Mode::Plain,
            check,
            Box::new(move |k| match k {
                Kind::Basalt => Ok(q(&basalt)),
                Kind::Duckdb => Ok(q(&duck)),
                Kind::Sqlite => Err("SQLite cannot query files".into()),
            }),
        );
    };
    file_metric(&mut b, "OLAP-63", "CSV read + COUNT(*)", Full, "SELECT COUNT(*) FROM {csv}");
    file_metric(
        &mut b,
        "OLAP-64",
        "CSV read + filter + GROUP BY",
        Full,
        "SELECT city, COUNT(*) FROM {csv} WHERE age > 30 GROUP BY city",
    );
    file_metric(&mut b, "OLAP-65", "CSV read + LIMIT 1000", Rows, "SELECT * FROM {csv} LIMIT 1000");
    file_metric(&mut b, "OLAP-66", "JSON read + COUNT(*)", Full, "SELECT COUNT(*) FROM {json}");
    file_metric(
        &mut b,
        "OLAP-67",
        "JSON read + filter",
        Full,
        "SELECT COUNT(*) FROM {json} WHERE age > 30",
    );
    file_metric(
        &mut b,
        "OLAP-68",
        "JSON read + GROUP BY category",
        Full,
        "SELECT category, COUNT(*) FROM {json} GROUP BY category",
    );
    let (csv2, csv3) = (csv.clone(), csv.clone());
    let m = b.add(
        "OLAP-69",
        "Table imported from CSV: filter + AVG",
        G::FileScans,
        Mode::Micro,
        Full,
        Box::new(|k| {
            if k == Kind::Sqlite {
                Err("SQLite cannot query files".into())
            } else {
                Ok(q("SELECT AVG(score) FROM csv_import WHERE age > 30"))
            }
        }),
    );
    m.pre = Some(ddl(move |k| {
        let src = if k == Kind::Duckdb {
            format!("read_csv_auto('{csv2}')")
        } else {
            format!("read_csv('{csv3}')")
        };
        format!("DROP TABLE IF EXISTS csv_import; CREATE TABLE csv_import AS SELECT * FROM {src}")
    }));
    file_metric(
        &mut b,
        "OLAP-70",
        "JSON read + ORDER BY LIMIT 100",
        Cols(&[2]),
        "SELECT * FROM {json} ORDER BY score DESC LIMIT 100",
    );
    file_metric(
        &mut b,
        "OLAP-71",
        "CSV read + ORDER BY LIMIT 100",
        Cols(&[2]),
        "SELECT * FROM {csv} ORDER BY score DESC LIMIT 100",
    );

    // ---- OLTP reads.
    let id_param = move |c: usize| vec![P::I(rot_id(n, c))];
    b.add(
        "OLTP-2",
        "Point lookup (SQL by _id)",
        G::PointReads,
        Mode::Micro,
        Full,
        all(qp("SELECT * FROM bench WHERE _id = $1", id_param)),
    );
    b.add(
        "OLTP-3",
        "Retrieve 100 ids (SQL, full rows)",
        G::PointReads,
        Mode::Plain,
        Full,
        all(qp(
            &format!("SELECT * FROM bench WHERE _id IN ({})", placeholders(1, 100)),
            move |c| rot_ids(n, c, 100),
        )),
    );
    let count_direct: Work =
        Rc::new(|e, _| basalt_of(e)?.bench()?.count().map(Out::Count).map_err(err));
    b.add(
        "OLTP-4",
        "COUNT(*) (Basalt: direct count())",
        G::PointReads,
        Mode::Micro,
        Full,
        basalt_or(count_direct.clone(), q("SELECT COUNT(*) FROM bench")),
    );
    b.add(
        "OLTP-5",
        "Point lookup (projected SQL)",
        G::PointReads,
        Mode::Micro,
        Full,
        all(qp("SELECT name, age, score FROM bench WHERE _id = $1", id_param)),
    );
    let get: Work = Rc::new(move |e, c| {
        basalt_of(e)?.bench()?.get(rot_id(n, c) as u64).map(Out::Row).map_err(err)
    });
    b.add(
        "OLTP-6",
        "Point lookup (Basalt: direct get(_id))",
        G::PointReads,
        Mode::Micro,
        Full,
        basalt_or(get, qp("SELECT * FROM bench WHERE _id = $1", id_param)),
    );
    let get_missing: Work = Rc::new(move |e, c| {
        basalt_of(e)?.bench()?.get(missing_id(n, c) as u64).map(Out::Row).map_err(err)
    });
    b.add(
        "OLTP-7",
        "Missing id lookup (Basalt: direct get)",
        G::PointReads,
        Mode::Micro,
        Rows,
        basalt_or(
            get_missing,
            qp("SELECT * FROM bench WHERE _id = $1", move |c| vec![P::I(missing_id(n, c))]),
        ),
    );
    b.add(
        "OLTP-8",
        "Retrieve 10 ids (projected SQL)",
        G::PointReads,
        Mode::Micro,
        Full,
        all(qp(
            &format!("SELECT name, age, score FROM bench WHERE _id IN ({})", placeholders(1, 10)),
            move |c| rot_ids(n, c, 10),
        )),
    );
    b.add(
        "OLTP-9",
        "Retrieve 100 ids (projected SQL)",
        G::PointReads,
        Mode::Micro,
        Full,
        all(qp(
            &format!("SELECT name, age, score FROM bench WHERE _id IN ({})", placeholders(1, 100)),
            move |c| rot_ids(n, c, 100),
        )),
    );
    b.add(
        "OLTP-10",
        "SELECT 3 cols LIMIT 100",
        G::PointReads,
        Mode::Micro,
        Rows,
        all(q("SELECT name, age, city FROM bench LIMIT 100")),
    );
    b.add(
        "OLTP-11",
        "String equality (projected; rotated)",
        G::PointReads,
        Mode::Micro,
        Full,
        all(qp("SELECT age, score, city FROM bench WHERE name = $1", move |c| {
            vec![rot_name(n, c)]
        })),
    );
    b.add(
        "OLTP-12",
        "City filter LIMIT 100 (rotated)",
        G::PointReads,
        Mode::Micro,
        Rows,
        all(qp("SELECT name, age FROM bench WHERE city = $1 LIMIT 100", |c| vec![rot_city(c)])),
    );

    // ---- OLTP writes (default durability: survives a killed process on every engine).
    let one = || oltp_row("oltp_one", 31, 77.0, "Beijing", "Books");
    // The SQL engines run the plain INSERT (no RETURNING: the id is not needed here).
    let insert: Work = Rc::new(move |e, _| e.insert_one(&one()).map(|_| Out::Unit));
    b.add(
        "OLTP-13",
        "Insert 1 row (Basalt: direct insert_row)",
        G::Dml,
        Mode::MicroWrite,
        Check::None,
        basalt_or(insert, xp(crate::engines::INSERT_SQL, move |_| one().params())),
    );
    let insert_read: Work = Rc::new(move |e, _| {
        let id = e.insert_one(&one())?;
        match e.kind() {
            Kind::Basalt => basalt_of(e)?.bench()?.get(id as u64).map(Out::Row).map_err(err),
            _ => e.query("SELECT * FROM bench WHERE _id = $1", &[P::I(id)]),
        }
    });
    b.add(
        "OLTP-14",
        "Insert + read own row (Basalt: direct)",
        G::Dml,
        Mode::MicroWrite,
        Full,
        all(insert_read),
    );
    let insert_count: Work = Rc::new(move |e, _| {
        e.insert_one(&one())?;
        match e.kind() {
            Kind::Basalt => basalt_of(e)?.bench()?.count().map(Out::Count).map_err(err),
            _ => e.query("SELECT COUNT(*) FROM bench", &[]),
        }
    });
    b.add(
        "OLTP-15",
        "Insert + COUNT visible (Basalt: direct)",
        G::Dml,
        Mode::MicroWrite,
        Full,
        all(insert_count),
    );
    b.add(
        "OLTP-16",
        "UPDATE by _id (rotated)",
        G::Dml,
        Mode::MicroWrite,
        Full,
        all(xp("UPDATE bench SET score = 77.0 WHERE _id = $1", id_param)),
    );
    b.add(
        "OLTP-17",
        "UPDATE missing _id",
        G::Dml,
        Mode::MicroWrite,
        Full,
        all(xp("UPDATE bench SET score = 77.0 WHERE _id = $1", move |c| {
            vec![P::I(missing_id(n, c))]
        })),
    );
    let upd_read: Work = Rc::new(move |e, c| {
        let id = rot_id(n, c);
        e.execute("UPDATE bench SET score = 77.0 WHERE _id = $1", &[P::I(id)])?;
        e.query("SELECT score FROM bench WHERE _id = $1", &[P::I(id)])
    });
    b.add("OLTP-18", "UPDATE + read by _id", G::Dml, Mode::MicroWrite, Full, all(upd_read));
    let data = ctx.data.clone();
    let replace_basalt: Work = Rc::new(move |e, c| {
        let id = rot_id(n, c);
        let r = &data.rows[(id - 1) as usize];
        let row = basalt::Row::new()
            .set("name", r.name.as_str())
            .set("age", r.age)
            .set("score", r.score)
            .set("city", r.city)
            .set("category", r.category);
        basalt_of(e)?
            .bench()?
            .update(id as u64, row)
            .map(|ok| Out::Count(u64::from(ok)))
            .map_err(err)
    });
    let data = ctx.data.clone();
    let replace_sql: Work = Rc::new(move |e, c| {
        let id = rot_id(n, c);
        let mut p = data.rows[(id - 1) as usize].params();
        p.push(P::I(id));
        e.execute("UPDATE bench SET name = $1, age = $2, score = $3, city = $4, category = $5 WHERE _id = $6", &p).map(Out::Count)
    });
    b.add(
        "OLTP-19",
        "Replace row by _id (Basalt: direct update)",
        G::Dml,
        Mode::MicroWrite,
        Full,
        basalt_or(replace_basalt, replace_sql),
    );
    let ins_del: Work = Rc::new(move |e, _| {
        let id = e.insert_one(&one())?;
        match e.kind() {
            Kind::Basalt => basalt_of(e)?
                .bench()?
                .delete(id as u64)
                .map(|d| Out::Count(u64::from(d)))
                .map_err(err),
            _ => e.execute("DELETE FROM bench WHERE _id = $1", &[P::I(id)]).map(Out::Count),
        }
    });
    b.add(
        "OLTP-20",
        "Insert + DELETE by _id (Basalt: direct)",
        G::Dml,
        Mode::MicroWrite,
        Full,
        all(ins_del),
    );
    let del_missing: Work = Rc::new(move |e, c| {
        basalt_of(e)?
            .bench()?
            .delete(missing_id(n, c) as u64)
            .map(|d| Out::Count(u64::from(d)))
            .map_err(err)
    });
    b.add(
        "OLTP-21",
        "DELETE missing _id (Basalt: direct)",
        G::Dml,
        Mode::MicroWrite,
        Full,
        basalt_or(
            del_missing,
            xp("DELETE FROM bench WHERE _id = $1", move |c| vec![P::I(missing_id(n, c))]),
        ),
    );
    let k_rows = |age: i64| -> Vec<BenchRow> {
        (0..1000).map(|i| oltp_row(&format!("new_{i}"), age, 50.0, "Beijing", "Books")).collect()
    };
    let rows25 = Rc::new(k_rows(25));
    let ins1k: Work = Rc::new(move |e, _| e.insert_many(&rows25).map(|_| Out::Unit));
    b.add(
        "OLTP-22",
        "Insert 1K rows (bulk path, one commit)",
        G::Load,
        Mode::Plain,
        Check::None,
        all(ins1k),
    );
    b.add(
        "OLTP-23",
        "UPDATE ~16K rows (age = 25)",
        G::Dml,
        Mode::Plain,
        Full,
        all(xp("UPDATE bench SET score = 50.0 WHERE age = 25", |_| Vec::new())),
    );
    let rows99 = Rc::new(k_rows(99));
    let r99 = rows99.clone();
    let store_del: Work = Rc::new(move |e, _| {
        e.insert_many(&r99)?;
        e.execute("DELETE FROM bench WHERE age = 99", &[]).map(Out::Count)
    });
    b.add("OLTP-24", "Insert 1K + DELETE them", G::Dml, Mode::Plain, Full, all(store_del));
    let m = b.add(
        "OLTP-25",
        "DELETE 1K rows (rows inserted in setup)",
        G::Dml,
        Mode::Setup,
        Full,
        all(xp("DELETE FROM bench WHERE age = 99", |_| Vec::new())),
    );
    m.setup = Some(Rc::new(move |e, _| e.insert_many(&rows99).map(|_| Out::Unit)));

    // ---- Full-text search.
    let duck_fts = ctx.duck_fts;
    let fts_build = Box::new(move |k: Kind| match k {
        Kind::Basalt => Ok(ddl(|_| {
            "DROP FTS INDEX IF EXISTS ON bench; CREATE FTS INDEX ON bench (name, city, category)"
                .into()
        })),
        Kind::Sqlite => Ok(ddl(|_| {
            "DROP TABLE IF EXISTS bench_fts; CREATE VIRTUAL TABLE bench_fts USING fts5(name, city, category, content='bench', content_rowid='_id'); INSERT INTO bench_fts(bench_fts) VALUES('rebuild')".into()
        })),
        Kind::Duckdb if duck_fts => Ok(ddl(|_| {
            "PRAGMA create_fts_index('bench', '_id', 'name', 'city', 'category', overwrite = 1)"
                .into()
        })),
        Kind::Duckdb => Err("BASALT_DUCKDB_FTS not set".into()),
    });
    b.add(
        "OLTP-26",
        "FTS index build (name, city, category)",
        G::Search,
        Mode::Once,
        Check::None,
        fts_build,
    );
    let fts_search = Box::new(move |k: Kind| match k {
        Kind::Basalt => Ok(q("SELECT _id FROM fts_search('bench', 'Electronics')")),
        Kind::Sqlite => Ok(q("SELECT rowid FROM bench_fts WHERE bench_fts MATCH 'Electronics'")),
        Kind::Duckdb if duck_fts => Ok(q(
            "SELECT _id FROM bench WHERE fts_main_bench.match_bm25(_id, 'Electronics') IS NOT NULL",
        )),
        Kind::Duckdb => Err("BASALT_DUCKDB_FTS not set".into()),
    });
    b.add("OLTP-27", "FTS search 'Electronics'", G::Search, Mode::Plain, Rows, fts_search);

    // ---- Table operations (DDL follows each engine's default durability).
    let int = |k: Kind| if k == Kind::Basalt { "BIGINT" } else { "INTEGER" };
    let m = b.add(
        "OLTP-28",
        "CREATE TABLE (1 col)",
        G::TableOps,
        Mode::Setup,
        Check::None,
        all(ddl(move |k| format!("CREATE TABLE bench_table_ops (k {})", int(k)))),
    );
    m.setup = Some(ddl(|_| "DROP TABLE IF EXISTS bench_table_ops".into()));
    let m = b.add(
        "OLTP-29",
        "DROP TABLE",
        G::TableOps,
        Mode::Setup,
        Check::None,
        all(ddl(|_| "DROP TABLE bench_table_ops".into())),
    );
    m.setup = Some(ddl(move |k| {
        format!("DROP TABLE IF EXISTS bench_table_ops; CREATE TABLE bench_table_ops (k {})", int(k))
    }));
    b.add("OLTP-30", "CREATE + DROP cycle", G::TableOps, Mode::Setup, Check::None,
        all(ddl(move |k| format!("DROP TABLE IF EXISTS bench_table_ops; CREATE TABLE bench_table_ops (k {}); DROP TABLE bench_table_ops", int(k)))));
    let list_basalt: Work = Rc::new(|e, _| {
        let mut names: Vec<String> = basalt_of(e)?
            .db()
            .list_tables()
            .into_iter()
            .filter(|t| t.starts_with("bench_table_ops"))
            .collect();
        names.sort();
        Ok(Out::Names(names))
    });
    let list_sql = Box::new(move |k: Kind| {
        Ok(match k {
            Kind::Basalt => list_basalt.clone(),
            Kind::Sqlite => q(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'bench_table_ops%' ORDER BY name",
            ),
            Kind::Duckdb => q(
                "SELECT table_name FROM duckdb_tables() WHERE table_name LIKE 'bench_table_ops%' ORDER BY table_name",
            ),
        })
    });
    let m = b.add(
        "OLTP-31",
        "List tables (10; Basalt: direct list_tables)",
        G::TableOps,
        Mode::Plain,
        Full,
        list_sql,
    );
    m.pre = Some(ddl(move |k| {
        (0..10)
            .map(|i| format!("CREATE TABLE IF NOT EXISTS bench_table_ops_{i} (k {});", int(k)))
            .collect()
    }));
    let m = b.add(
        "OLTP-32",
        "ALTER TABLE ADD COLUMN",
        G::TableOps,
        Mode::Setup,
        Check::None,
        all(ddl(move |k| format!("ALTER TABLE bench_table_ops ADD COLUMN c {}", int(k)))),
    );
    m.setup = Some(ddl(move |k| {
        format!("DROP TABLE IF EXISTS bench_table_ops; CREATE TABLE bench_table_ops (k {})", int(k))
    }));

    b.out
}

/// The §4 diagnostics: durable single-row writes, transaction costs with and without a
/// backlog of small committed transactions. Not ranked.
pub fn diagnostics(ctx: &Ctx) -> Vec<Metric> {
    use Group as G;
    let n = ctx.rows;
    let mut b = Builder { out: Vec::new() };
    let row = || oltp_row("diag_one", 31, 77.0, "Beijing", "Books");
    let add = |b: &mut Builder, id: &str, name: &str, check: Check, w: Work| {
        let m = b.add(id, name, G::Diagnostics, Mode::MicroWrite, check, all(w));
        m.ranked = false;
    };

    // Power-safe tier: commits survive power loss on every engine (Basalt PowerSafe, SQLite
    // synchronous=FULL, DuckDB's synced WAL).
    let durable = |w: Work| -> Work {
        Rc::new(move |e, c| {
            e.set_power_safe(true)?;
            let r = w(e, c);
            e.set_power_safe(false)?;
            r
        })
    };
    add(
        &mut b,
        "DIAG-1",
        "Insert 1 row (power-safe)",
        Check::None,
        durable(Rc::new(move |e, _| e.insert_one(&row()).map(|_| Out::Unit))),
    );
    add(
        &mut b,
        "DIAG-2",
        "UPDATE by _id (power-safe)",
        Check::Full,
        durable(xp("UPDATE bench SET score = 66.0 WHERE _id = $1", move |c| {
            vec![P::I(rot_id(n, c))]
        })),
    );
    let txn = |stmts: Vec<(&'static str, bool)>| -> Work {
        Rc::new(move |e, c| {
            let mut out = Out::Unit;
            for (s, is_query) in &stmts {
                let params: Vec<P> =
                    if s.contains("$1") { vec![P::I(rot_id(n, c))] } else { Vec::new() };
                if *is_query {
                    out = e.query(s, &params)?;
                } else if s.starts_with("BEGIN")
                    || s.starts_with("COMMIT")
                    || s.starts_with("ROLLBACK")
                {
                    e.batch(s)?;
                } else {
                    e.execute(s, &params)?;
                }
            }
            Ok(out)
        })
    };
    add(
        &mut b,
        "DIAG-3",
        "TXN empty (BEGIN + COMMIT, power-safe)",
        Check::None,
        durable(txn(vec![("BEGIN", false), ("COMMIT", false)])),
    );
    add(
        &mut b,
        "DIAG-4",
        "TXN read COUNT(*) (power-safe)",
        Check::Full,
        durable(txn(vec![
            ("BEGIN", false),
            ("SELECT COUNT(*) FROM bench", true),
            ("COMMIT", false),
        ])),
    );
    add(
        &mut b,
        "DIAG-5",
        "BEGIN + ROLLBACK",
        Check::None,
        txn(vec![("BEGIN", false), ("ROLLBACK", false)]),
    );
    let ins = "INSERT INTO bench (name, age, score, city, category) VALUES ('diag_txn', 40, 10.0, 'Wuhan', 'Food')";
    add(
        &mut b,
        "DIAG-6",
        "TXN INSERT 1 + COMMIT",
        Check::None,
        txn(vec![("BEGIN", false), (ins, false), ("COMMIT", false)]),
    );
    let mut ten = vec![("BEGIN", false)];
    ten.extend(std::iter::repeat_n((ins, false), 10));
    let mut ten_rb = ten.clone();
    ten.push(("COMMIT", false));
    ten_rb.push(("ROLLBACK", false));
    add(&mut b, "DIAG-7", "TXN 10 INSERT statements + COMMIT", Check::None, txn(ten));
    let multi = |k: usize| -> &'static str {
        let vals = vec!["('diag_multi', 41, 11.0, 'Xian', 'Auto')"; k].join(", ");
        Box::leak(
            format!("INSERT INTO bench (name, age, score, city, category) VALUES {vals}")
                .into_boxed_str(),
        )
    };
    add(
        &mut b,
        "DIAG-8",
        "TXN multi-row INSERT (10) + COMMIT",
        Check::None,
        txn(vec![("BEGIN", false), (multi(10), false), ("COMMIT", false)]),
    );
    let mut hundred = vec![("BEGIN", false)];
    hundred.extend(std::iter::repeat_n((ins, false), 100));
    hundred.push(("COMMIT", false));
    add(&mut b, "DIAG-9", "TXN 100 INSERT statements + COMMIT", Check::None, txn(hundred));
    add(
        &mut b,
        "DIAG-10",
        "TXN multi-row INSERT (100) + COMMIT",
        Check::None,
        txn(vec![("BEGIN", false), (multi(100), false), ("COMMIT", false)]),
    );
    add(&mut b, "DIAG-11", "TXN 10 INSERT statements + ROLLBACK", Check::None, txn(ten_rb));
    add(
        &mut b,
        "DIAG-12",
        "TXN UPDATE by _id + COMMIT",
        Check::None,
        txn(vec![
            ("BEGIN", false),
            ("UPDATE bench SET score = 12.0 WHERE _id = $1", false),
            ("COMMIT", false),
        ]),
    );
    add(
        &mut b,
        "DIAG-13",
        "TXN INSERT + read own row by name + COMMIT",
        Check::Full,
        txn(vec![
            ("BEGIN", false),
            (ins, false),
            ("SELECT name, age FROM bench WHERE name = 'diag_txn' LIMIT 1", true),
            ("COMMIT", false),
        ]),
    );

    // A backlog of 1,500 single-row committed transactions (power-safe), then reads.
    let backlog: Work = Rc::new(|e, _| {
        e.set_power_safe(true)?;
        for i in 0..1500 {
            e.batch("BEGIN")?;
            e.execute(
                "INSERT INTO bench (name, age, score, city, category) VALUES ($1, 50, 1.0, 'Wuhan', 'Food')",
                &[P::S(format!("txn_backlog_{i}"))],
            )?;
            e.batch("COMMIT")?;
        }
        e.set_power_safe(false)?;
        Ok(Out::Unit)
    });
    let miss = durable(txn(vec![
        ("BEGIN", false),
        ("SELECT * FROM bench WHERE name = '__txn_backlog_missing__'", true),
        ("COMMIT", false),
    ]));
    let m = b.add(
        "DIAG-14",
        "TXN backlog: string miss (power-safe)",
        G::Diagnostics,
        Mode::MicroWrite,
        Check::Full,
        all(miss),
    );
    m.ranked = false;
    m.pre = Some(backlog);
    add(
        &mut b,
        "DIAG-15",
        "TXN backlog: COUNT(*) (power-safe)",
        Check::Full,
        durable(txn(vec![
            ("BEGIN", false),
            ("SELECT COUNT(*) FROM bench", true),
            ("COMMIT", false),
        ])),
    );
    add(
        &mut b,
        "DIAG-16",
        "TXN backlog: INSERT + read own by name (power-safe)",
        Check::Full,
        durable(txn(vec![
            ("BEGIN", false),
            (ins, false),
            ("SELECT name, age FROM bench WHERE name = 'diag_txn' LIMIT 1", true),
            ("COMMIT", false),
        ])),
    );

    // Basalt's SQL single-row insert, beside its direct-API figure of OLTP-13.
    let m = b.add(
        "DIAG-17",
        "Insert 1 row through SQL (prepared)",
        G::Diagnostics,
        Mode::MicroWrite,
        Check::Full,
        all(xp(crate::engines::INSERT_SQL, move |_| row().params())),
    );
    m.ranked = false;
    b.out
}
