//! The bulk load (OLTP-1, which creates the tables) and the OLAP metrics (1–71), file
//! scans included.

use std::rc::Rc;

use basalt_benches::check::Check;

use super::*;
use crate::engines::{Kind, Out};

/// Adds the bulk load and OLAP 1–71 to `b`, in the order they run.
pub(super) fn olap(b: &mut Builder, ctx: &Ctx) {
    use Check::{Cols, Full, Rows};
    use Group as G;
    let n = ctx.rows;

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
    file_metric(b, "OLAP-63", "CSV read + COUNT(*)", Full, "SELECT COUNT(*) FROM {csv}");
    file_metric(
        b,
        "OLAP-64",
        "CSV read + filter + GROUP BY",
        Full,
        "SELECT city, COUNT(*) FROM {csv} WHERE age > 30 GROUP BY city",
    );
    file_metric(b, "OLAP-65", "CSV read + LIMIT 1000", Rows, "SELECT * FROM {csv} LIMIT 1000");
    file_metric(b, "OLAP-66", "JSON read + COUNT(*)", Full, "SELECT COUNT(*) FROM {json}");
    file_metric(
        b,
        "OLAP-67",
        "JSON read + filter",
        Full,
        "SELECT COUNT(*) FROM {json} WHERE age > 30",
    );
    file_metric(
        b,
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
        b,
        "OLAP-70",
        "JSON read + ORDER BY LIMIT 100",
        Cols(&[2]),
        "SELECT * FROM {json} ORDER BY score DESC LIMIT 100",
    );
    file_metric(
        b,
        "OLAP-71",
        "CSV read + ORDER BY LIMIT 100",
        Cols(&[2]),
        "SELECT * FROM {csv} ORDER BY score DESC LIMIT 100",
    );
}
