//! The §4 diagnostics: durable single-row writes and transaction costs. Not ranked.

use std::rc::Rc;

use basalt_benches::check::Check;

use super::*;
use crate::engines::{Out, P};

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
