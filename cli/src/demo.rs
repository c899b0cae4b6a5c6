//! `basalt demo [DIR] [--rows N]`: builds a realistic database and shows what Basalt does
//! with it, timing each step.
//!
//! The data: the benchmark's `users` table (`benches/README.md`, *Data*: unique names, uniform ages and
//! scores, 10 cities, 10 categories, from a seeded generator) with its `meta(city, pop)`
//! table, and a `docs` table of short articles on 10 topics with a 128-dimension embedding
//! each (a topic's direction plus noise, so nearby vectors share a topic). Then: SQL
//! analytics, a point lookup, a window query, a vector top-k, a full-text index build and
//! search, and a hybrid (BM25 + vector, RRF) search. Everything goes through the public
//! API and SQL; nothing here is specific to the demo's data inside the engine.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use basalt::arrow::array::{
    ArrayRef, FixedSizeListArray, Float32Array, Float64Array, Int64Array, RecordBatch, StringArray,
};
use basalt::arrow::schema::{DataType, Field, Schema};
use basalt::{Database, Hybrid, Metric};
use basalt_dataset::{META, Rng, SEED, bench_schema, dataset};

use crate::CliError;
use crate::import::group;
use crate::output::{Mode, Printer};

/// Topics of the articles: a name and the words its articles are mostly made of.
const TOPICS: [(&str, [&str; 12]); 10] = [
    (
        "space",
        [
            "galaxy",
            "telescope",
            "orbit",
            "planet",
            "rocket",
            "astronaut",
            "nebula",
            "launch",
            "satellite",
            "comet",
            "lunar",
            "cosmic",
        ],
    ),
    (
        "databases",
        [
            "query",
            "index",
            "transaction",
            "column",
            "storage",
            "engine",
            "durable",
            "replica",
            "schema",
            "vector",
            "latency",
            "segment",
        ],
    ),
    (
        "cooking",
        [
            "recipe", "garlic", "oven", "simmer", "noodles", "spice", "dumpling", "broth",
            "kitchen", "roast", "flavor", "sauce",
        ],
    ),
    (
        "football",
        [
            "goal", "striker", "league", "match", "penalty", "coach", "stadium", "midfield",
            "season", "keeper", "derby", "transfer",
        ],
    ),
    (
        "music",
        [
            "guitar",
            "melody",
            "concert",
            "album",
            "chorus",
            "rhythm",
            "violin",
            "orchestra",
            "lyrics",
            "tempo",
            "band",
            "piano",
        ],
    ),
    (
        "gardening",
        [
            "soil",
            "seedling",
            "compost",
            "prune",
            "bloom",
            "tomato",
            "orchard",
            "harvest",
            "mulch",
            "greenhouse",
            "roots",
            "watering",
        ],
    ),
    (
        "finance",
        [
            "market",
            "bond",
            "dividend",
            "inflation",
            "portfolio",
            "equity",
            "interest",
            "budget",
            "currency",
            "audit",
            "savings",
            "hedge",
        ],
    ),
    (
        "travel",
        [
            "passport",
            "itinerary",
            "hostel",
            "flight",
            "luggage",
            "museum",
            "island",
            "train",
            "border",
            "journey",
            "beach",
            "guidebook",
        ],
    ),
    (
        "medicine",
        [
            "vaccine",
            "clinic",
            "diagnosis",
            "surgery",
            "symptom",
            "therapy",
            "nurse",
            "antibody",
            "dosage",
            "patient",
            "immune",
            "trial",
        ],
    ),
    (
        "climate",
        [
            "carbon", "glacier", "emission", "drought", "solar", "turbine", "rainfall", "warming",
            "forest", "ocean", "methane", "heatwave",
        ],
    ),
];
const COMMON: [&str; 16] = [
    "new", "study", "people", "report", "year", "city", "team", "first", "story", "guide", "best",
    "how", "why", "local", "today", "history",
];
const DIM: usize = 128;

/// Uniform in `0..n`.
fn below(rng: &mut Rng, n: u64) -> u64 {
    rng.next_u64() % n
}

/// Uniform in [-1, 1).
fn signed(rng: &mut Rng) -> f32 {
    (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

/// `basalt demo [DIR] [--rows N]`.
pub fn command(args: &[String]) -> Result<(), CliError> {
    let mut rows: usize = 1_000_000;
    let mut dir: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rows" => rows = crate::number(crate::value(&mut it, a)?, a)?.max(100),
            s if s.starts_with('-') => {
                return Err(CliError::Usage(format!("unknown demo option {s}")));
            }
            s if dir.is_none() => dir = Some(PathBuf::from(s)),
            s => return Err(CliError::Usage(format!("unexpected argument {s}"))),
        }
    }
    let (path, temporary) = match dir {
        Some(d) => (d.join("demo.basalt"), false),
        None => (std::env::temp_dir().join(format!("basalt-demo-{}", std::process::id())), true),
    };
    let r = run(&path, rows);
    if temporary {
        let _ = std::fs::remove_dir_all(&path);
    } else if r.is_ok() {
        println!(
            "\nThe database stays at {} — open it with: basalt {}",
            path.display(),
            path.display()
        );
    }
    r
}

/// Prints a step's title and time.
fn step(title: &str, ms: f64) {
    println!("\n== {title}  ({ms:.1} ms)");
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn run(path: &std::path::Path, rows: usize) -> Result<(), CliError> {
    let docs_n = (rows / 10).max(200);
    println!(
        "Basalt demo: {} rows of users, {} articles with {DIM}-d embeddings, database at {}",
        group(rows as u64),
        group(docs_n as u64),
        path.display()
    );
    let db = Database::open(path)?;
    for t in ["users", "meta", "docs"] {
        if db.list_tables().iter().any(|n| n == t) {
            db.drop_table(t)?;
        }
    }
    let printer = Printer { mode: Mode::Table, max_width: 60, ..Printer::default() };
    let mut timings: Vec<(String, f64)> = Vec::new();

    // 1. Data.
    let t = Instant::now();
    load_users(&db, rows)?;
    let load_ms = ms(t);
    step(
        &format!("loaded users: {} rows through Table::insert_batches", group(rows as u64)),
        load_ms,
    );
    timings.push(("load users".into(), load_ms));
    let t = Instant::now();
    let topic_dirs = load_docs(&db, docs_n)?;
    let docs_ms = ms(t);
    step(
        &format!("loaded docs: {} articles with {DIM}-d embeddings", group(docs_n as u64)),
        docs_ms,
    );
    timings.push(("load docs".into(), docs_ms));
    let t = Instant::now();
    db.flush()?;
    let f = ms(t);
    step("db.flush(): memtable rows to columnar segments (bulk inserts wrote theirs directly)", f);
    timings.push(("flush".into(), f));

    // 2. SQL.
    let conn = db.connect();
    let point = (rows as u64 / 2).max(1);
    let queries: Vec<(&str, String)> = vec![
        ("count", "SELECT count(*) AS users FROM users".into()),
        (
            "group by city",
            "SELECT city, count(*) AS users, round(avg(score), 2) AS avg_score, min(age) AS min_age, max(age) AS max_age\n  FROM users GROUP BY city ORDER BY users DESC".into(),
        ),
        (
            "filtered group by",
            "SELECT category, count(*) AS n, round(avg(score), 2) AS avg_score\n  FROM users WHERE age BETWEEN 25 AND 35 AND city IN ('Beijing', 'Shanghai')\n  GROUP BY category ORDER BY n DESC LIMIT 5".into(),
        ),
        (
            "top-N",
            "SELECT name, age, score, city FROM users\n  WHERE category = 'Electronics' ORDER BY score DESC, name LIMIT 5".into(),
        ),
        (
            "join",
            "SELECT m.city, m.pop, count(*) AS users, round(count(*) * 1e6 / m.pop, 1) AS per_million\n  FROM users u JOIN meta m ON u.city = m.city\n  GROUP BY m.city, m.pop ORDER BY per_million DESC LIMIT 5".into(),
        ),
        (
            "window: best score per city",
            "SELECT city, name, score FROM (\n  SELECT city, name, score, row_number() OVER (PARTITION BY city ORDER BY score DESC, name) AS r FROM users)\n  WHERE r = 1 ORDER BY city LIMIT 5".into(),
        ),
        ("point lookup", format!("SELECT _id, * FROM users WHERE _id = {point}")),
        ("LIKE prefix", "SELECT count(*) AS n FROM users WHERE name LIKE 'user_1%'".into()),
    ];
    for (title, sql) in &queries {
        let t = Instant::now();
        let batches = conn.sql(sql)?;
        let q = ms(t);
        step(&format!("SQL: {title}"), q);
        timings.push((format!("SQL {title}"), q));
        println!("{sql};");
        show(&printer, &batches)?;
    }

    // 3. Vector top-k.
    let docs = db.table("docs")?;
    let query = topic_query(&topic_dirs, 0, 1);
    let t = Instant::now();
    let near = docs.topk("embedding", &query, 5, Metric::Cosine)?;
    let v = ms(t);
    step("vector top-k: docs.topk(\"embedding\", <a 'space' query vector>, 5, Metric::Cosine)", v);
    timings.push(("vector top-k".into(), v));
    let ids: Vec<u64> = near.iter().map(|n| n.id).collect();
    let dist: Vec<String> = near.iter().map(|n| format!("{:.4}", n.distance)).collect();
    show_docs(&printer, &docs, &ids, ("distance", &dist))?;

    // 4. Full-text.
    let t = Instant::now();
    conn.sql("CREATE FTS INDEX ON docs (title, body) WITH (tokenizer = 'english')")?;
    let b = ms(t);
    step("full-text index: CREATE FTS INDEX ON docs (title, body) WITH (tokenizer = 'english')", b);
    timings.push(("FTS index build".into(), b));
    let sql = "SELECT d._id, round(s.score, 3) AS bm25, d.category, d.title\n  FROM fts_search('docs', 'telescope AND (orbit OR launch)', 5) s JOIN docs d ON d._id = s._id\n  ORDER BY s.score DESC, d._id";
    let t = Instant::now();
    let batches = conn.sql(sql)?;
    let s = ms(t);
    step("full-text search (BM25)", s);
    timings.push(("FTS search".into(), s));
    println!("{sql};");
    show(&printer, &batches)?;
    let sql = "SELECT count(*) AS matches FROM docs WHERE fts_match(body, 'recipe') AND category = 'cooking'";
    let t = Instant::now();
    let batches = conn.sql(sql)?;
    let s = ms(t);
    step("full-text predicate in WHERE", s);
    timings.push(("FTS predicate".into(), s));
    println!("{sql};");
    show(&printer, &batches)?;

    // 5. Hybrid.
    let query = topic_query(&topic_dirs, 1, 2);
    let t = Instant::now();
    let hits = docs.hybrid_search(
        "durable transaction",
        "embedding",
        &query,
        Metric::Cosine,
        5,
        Hybrid::default(),
    )?;
    let h = ms(t);
    step(
        "hybrid: docs.hybrid_search(\"durable transaction\", \"embedding\", <a 'databases' vector>, …) — BM25 + vector, RRF",
        h,
    );
    timings.push(("hybrid search".into(), h));
    let ids: Vec<u64> = hits.iter().map(|x| x.id).collect();
    let how: Vec<String> = hits
        .iter()
        .map(|x| {
            let rank =
                |r: Option<(usize, f32)>| r.map_or("-".to_string(), |(r, _)| format!("#{r}"));
            format!("{:.4} (text {}, vector {})", x.score, rank(x.text), rank(x.vector))
        })
        .collect();
    show_docs(&printer, &docs, &ids, ("fused score (ranks)", &how))?;

    println!("\n== Timings");
    let names: StringArray = timings.iter().map(|(n, _)| Some(n.as_str())).collect();
    let vals: Float64Array =
        timings.iter().map(|(_, v)| Some((v * 100.0).round() / 100.0)).collect();
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("step", DataType::Utf8, false),
            Field::new("ms", DataType::Float64, false),
        ])),
        vec![Arc::new(names), Arc::new(vals)],
    )?;
    show(&printer, &[batch])?;
    db.close()?;
    Ok(())
}

fn show(printer: &Printer, batches: &[RecordBatch]) -> Result<(), CliError> {
    let Some(first) = batches.first() else {
        return Ok(());
    };
    let schema = first.schema();
    let mut it = batches.iter().cloned().map(Ok);
    printer.print(&mut std::io::stdout().lock(), &schema, &mut it)?;
    Ok(())
}

/// Prints docs rows in the order of `ids`, with an extra column of per-row text.
fn show_docs(
    printer: &Printer,
    docs: &basalt::Table,
    ids: &[u64],
    extra: (&str, &[String]),
) -> Result<(), CliError> {
    let rows = docs.get_many_columns(ids, &["_id", "category", "title"])?;
    let mut cols: Vec<ArrayRef> = rows.columns().to_vec();
    let mut fields: Vec<Field> =
        rows.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    let e: StringArray = extra.1.iter().map(|s| Some(s.as_str())).collect();
    cols.insert(1, Arc::new(e));
    fields.insert(1, Field::new(extra.0, DataType::Utf8, false));
    show(printer, &[RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)?])
}

fn load_users(db: &Database, rows: usize) -> Result<(), CliError> {
    let users = db.create_table("users", &bench_schema())?;
    users.insert_batches(&dataset(rows, 65_536, SEED))?;
    let meta_schema = Arc::new(Schema::new(vec![
        Field::new("city", DataType::Utf8, false),
        Field::new("pop", DataType::Int64, false),
    ]));
    let meta = db.create_table("meta", &meta_schema)?;
    let c: StringArray = META.iter().map(|c| Some(c.0)).collect();
    let p: Int64Array = META.iter().map(|c| Some(c.1)).collect();
    meta.insert(&RecordBatch::try_new(meta_schema, vec![Arc::new(c), Arc::new(p)])?)?;
    Ok(())
}

/// A unit vector.
fn normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= n);
}

/// A query vector near topic `t` (a fresh draw of the topic's noise).
fn topic_query(dirs: &[Vec<f32>], t: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(1000 + seed);
    let mut q: Vec<f32> =
        dirs[t].iter().map(|x| x + 0.3 * signed(&mut rng) / (DIM as f32).sqrt()).collect();
    normalize(&mut q);
    q
}

/// Loads the articles; returns each topic's direction.
fn load_docs(db: &Database, n: usize) -> Result<Vec<Vec<f32>>, CliError> {
    let mut rng = Rng::new(7);
    let dirs: Vec<Vec<f32>> = (0..TOPICS.len())
        .map(|_| {
            let mut v: Vec<f32> = (0..DIM).map(|_| signed(&mut rng)).collect();
            normalize(&mut v);
            v
        })
        .collect();
    let schema = Schema::new(vec![
        Field::new("title", DataType::Utf8, false),
        Field::new("body", DataType::Utf8, false),
        Field::new("category", DataType::Utf8, false),
        Field::new("embedding", basalt::vector_type(DIM), false),
    ]);
    let docs = db.create_table("docs", &schema)?;
    let mut title = Vec::with_capacity(n);
    let mut body = Vec::with_capacity(n);
    let mut cat = Vec::with_capacity(n);
    let mut emb: Vec<f32> = Vec::with_capacity(n * DIM);
    for _ in 0..n {
        let t = below(&mut rng, TOPICS.len() as u64) as usize;
        let (topic, words) = TOPICS[t];
        let word = |rng: &mut Rng| -> &'static str {
            if below(rng, 5) == 0 {
                COMMON[below(rng, COMMON.len() as u64) as usize]
            } else {
                words[below(rng, 12) as usize]
            }
        };
        let tw: Vec<&str> = (0..3 + below(&mut rng, 3)).map(|_| word(&mut rng)).collect();
        let mut s = tw.join(" ");
        if let Some(f) = s.get_mut(0..1) {
            f.make_ascii_uppercase();
        }
        title.push(s);
        let bw: Vec<&str> = (0..20 + below(&mut rng, 20)).map(|_| word(&mut rng)).collect();
        body.push(bw.join(" ") + ".");
        cat.push(topic);
        let mut v: Vec<f32> = dirs[t]
            .iter()
            .map(|x| x + 0.6 * signed(&mut rng) / (DIM as f32).sqrt() * 3.0)
            .collect();
        normalize(&mut v);
        emb.extend_from_slice(&v);
    }
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let vectors =
        FixedSizeListArray::try_new(item, DIM as i32, Arc::new(Float32Array::from(emb)), None)?;
    let user = Arc::new(schema);
    docs.insert(&RecordBatch::try_new(
        user,
        vec![
            Arc::new(StringArray::from(title)),
            Arc::new(StringArray::from(body)),
            Arc::new(StringArray::from(cat)),
            Arc::new(vectors),
        ],
    )?)?;
    Ok(dirs)
}
