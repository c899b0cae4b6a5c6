//! The OLTP metrics 2–32: point reads, single-row and batch writes, full-text search and
//! table operations.

use std::rc::Rc;

use basalt_benches::check::Check;

use super::*;
use crate::engines::{BenchRow, Kind, Out, P};

/// Adds OLTP 2–32 to `b`, in the order they run.
pub(super) fn oltp(b: &mut Builder, ctx: &Ctx) {
    use Check::{Full, Rows};
    use Group as G;
    let n = ctx.rows;

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
}
