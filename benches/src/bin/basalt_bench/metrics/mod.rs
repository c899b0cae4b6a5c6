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

mod diagnostics;
mod olap;
mod oltp;

pub use diagnostics::diagnostics;

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
    /// Reopening a loaded database.
    Open,
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
    /// The TPC-H queries (`--suite tpch`).
    Tpch,
    /// The ClickBench queries (`--suite clickbench`).
    ClickBench,
    /// §4 diagnostics (not ranked).
    Diagnostics,
}

impl Group {
    /// Name for the report.
    pub fn name(self) -> &'static str {
        match self {
            Group::Load => "load",
            Group::Open => "open",
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
            Group::Tpch => "TPC-H",
            Group::ClickBench => "ClickBench",
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

impl Metric {
    /// A suite's load: timed once, ranked, nothing to cross-check; `pre` runs untimed
    /// before it (dropping what an earlier run left).
    pub fn load(
        id: &str,
        name: &str,
        pre: Work,
        work: Box<dyn Fn(Kind) -> Result<Work, String>>,
    ) -> Metric {
        Metric {
            id: id.into(),
            name: name.into(),
            group: Group::Load,
            mode: Mode::Once,
            check: Check::None,
            ranked: true,
            pre: Some(pre),
            setup: None,
            work,
        }
    }
}

impl Metric {
    /// Closing and reopening the loaded database, then `SELECT 1` (what an application
    /// pays to start on a database it made before).
    pub fn open(id: &str) -> Metric {
        Metric {
            id: id.into(),
            name: "Reopen the database, then SELECT 1".into(),
            group: Group::Open,
            mode: Mode::Plain,
            check: Check::None,
            ranked: true,
            pre: None,
            setup: None,
            work: Box::new(|_| {
                Ok(Rc::new(|e: &mut dyn Engine, _| {
                    e.reopen()?;
                    e.query("SELECT 1", &[])
                }) as Work)
            }),
        }
    }
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
    let mut b = Builder { out: Vec::new() };
    olap::olap(&mut b, ctx);
    oltp::oltp(&mut b, ctx);
    b.out
}
