//! The ClickBench suite (`--suite clickbench --rows N`): a `hits`-shaped table of N rows from
//! [`basalt_benches::hits`], written to Parquet and loaded into each engine's own storage as
//! a new user would (`CREATE TABLE hits AS SELECT * FROM read_parquet(…)`; SQLite gets the
//! same rows through one prepared `INSERT` in one transaction, timestamps as ISO text, into
//! a table with ClickBench's primary key), then the 43 queries
//! ([`basalt_benches::clickbench`]), each cross-checked between engines.

use std::path::Path;
use std::rc::Rc;

use basalt_benches::{clickbench, hits};

use crate::engines::{Engine, Kind, Out, Res};
use crate::metrics::{Group, Metric, Mode, Work};

/// The Parquet file of the table in `dir`.
fn file(dir: &Path) -> String {
    dir.join("hits.parquet").display().to_string()
}

/// Writes `rows` generated hits to `dir/hits.parquet`, making batches on two threads.
pub fn generate(rows: usize, dir: &Path) -> Res<()> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let path = std::path::PathBuf::from(file(dir));
    let mut writer = crate::data::parquet_writer(&path, hits::schema())?;
    let n = hits::batches(rows);
    let mut b = 0;
    while b < n {
        let (first, second) = std::thread::scope(|s| {
            let next = (b + 1 < n).then(|| s.spawn(move || hits::batch(rows, 1, b + 1)));
            (hits::batch(rows, 1, b), next.map(|h| h.join()))
        });
        writer.write(&first).map_err(|e| e.to_string())?;
        if let Some(second) = second {
            let second = second.map_err(|_| "hits generator panicked".to_string())?;
            writer.write(&second).map_err(|e| e.to_string())?;
        }
        b += 2;
    }
    writer.close().map(|_| ()).map_err(|e| e.to_string())
}

/// ClickBench's primary key, declared in SQLite (its plans for the `CounterID = 62` queries
/// use it); Basalt and DuckDB load with `CREATE TABLE … AS`, which declares none.
const PRIMARY_KEY: &str = "\"CounterID\", \"EventDate\", \"UserID\", \"EventTime\", \"WatchID\"";

/// The load (`CLICKBENCH-LOAD`, timed once), a reopen (`CLICKBENCH-OPEN`) and the 43
/// queries (`CLICKBENCH-Q00` …).
pub fn metrics(dir: &Path) -> Vec<Metric> {
    let path = file(dir);
    let drop: Work = Rc::new(|e, _| {
        e.batch("DROP TABLE IF EXISTS hits")?;
        Ok(Out::Unit)
    });
    let load = Box::new(move |k: Kind| -> Result<Work, String> {
        let path = path.clone();
        Ok(Rc::new(move |e: &mut dyn Engine, _| {
            match k {
                Kind::Sqlite => crate::tpch::sqlite_load(e, "hits", &path, PRIMARY_KEY)?,
                _ => {
                    e.batch(&format!("CREATE TABLE hits AS SELECT * FROM read_parquet('{path}')"))?
                }
            }
            Ok(Out::Unit)
        }) as Work)
    });
    let mut out = vec![
        Metric::load("CLICKBENCH-LOAD", "Load hits from Parquet", drop, load),
        Metric::open("CLICKBENCH-OPEN"),
    ];
    for n in 0..clickbench::COUNT {
        let sql = clickbench::query(n);
        let name: String = sql.chars().take(60).collect();
        out.push(Metric {
            id: format!("CLICKBENCH-Q{n:02}"),
            name: if sql.chars().count() > 60 { format!("{name}…") } else { name },
            group: Group::ClickBench,
            mode: Mode::Plain,
            check: clickbench::check(n),
            ranked: true,
            pre: None,
            setup: None,
            work: Box::new(move |k: Kind| -> Result<Work, String> {
                let text = if k == Kind::Sqlite {
                    clickbench::for_sqlite(&sql).ok_or("no REGEXP_REPLACE in SQLite")?
                } else {
                    sql.clone()
                };
                Ok(Rc::new(move |e: &mut dyn Engine, _| e.query(&text, &[])) as Work)
            }),
        });
    }
    out
}
