"""PEP 249 conformance, parameters, transactions, errors and threads."""

import datetime
import decimal
import threading

import pytest

import basalt


def test_module_globals():
    assert basalt.apilevel == "2.0"
    assert basalt.threadsafety in (1, 2, 3)
    assert basalt.paramstyle == "qmark"
    for name in [
        "Warning", "Error", "InterfaceError", "DatabaseError", "DataError", "OperationalError",
        "IntegrityError", "InternalError", "ProgrammingError", "NotSupportedError",
    ]:
        assert hasattr(basalt, name)


def test_exception_hierarchy():
    assert issubclass(basalt.Error, Exception)
    assert issubclass(basalt.Warning, Exception)
    assert issubclass(basalt.InterfaceError, basalt.Error)
    assert issubclass(basalt.DatabaseError, basalt.Error)
    for sub in [
        basalt.DataError, basalt.OperationalError, basalt.IntegrityError, basalt.InternalError,
        basalt.ProgrammingError, basalt.NotSupportedError,
    ]:
        assert issubclass(sub, basalt.DatabaseError)
    assert issubclass(basalt.ConflictError, basalt.IntegrityError)
    con = basalt.connect()
    assert con.Error is basalt.Error and con.IntegrityError is basalt.IntegrityError


def test_cursor_description_rowcount_fetch(con):
    cur = con.cursor()
    cur.execute("CREATE TABLE people (id BIGINT, name TEXT, born DATE)")
    cur.execute("INSERT INTO people VALUES (1, 'Ada', DATE '1815-12-10'), (2, 'Alan', NULL)")
    assert cur.rowcount == 2
    assert cur.description is None
    cur.execute("SELECT id, name, born FROM people ORDER BY id")
    d = cur.description
    assert [c[0] for c in d] == ["id", "name", "born"]
    assert all(len(c) == 7 for c in d)
    assert d[0][1] == basalt.NUMBER and d[1][1] == basalt.STRING and d[2][1] == basalt.DATETIME
    assert cur.rowcount == -1
    assert cur.fetchone() == (1, "Ada", datetime.date(1815, 12, 10))
    assert cur.fetchmany(5) == [(2, "Alan", None)]
    assert cur.fetchone() is None
    assert cur.fetchall() == []
    cur.execute("SELECT id FROM people ORDER BY id")
    cur.arraysize = 2
    assert cur.fetchmany() == [(1,), (2,)]
    cur.execute("SELECT id FROM people ORDER BY id")
    assert list(cur) == [(1,), (2,)]
    cur.execute("UPDATE people SET name = upper(name) WHERE id = 1")
    assert cur.rowcount == 1
    with pytest.raises(basalt.ProgrammingError):
        cur.fetchall()
    cur.close()
    with pytest.raises(basalt.InterfaceError):
        cur.execute("SELECT 1")


def test_parameter_styles(con):
    con.sql("CREATE TABLE p (a BIGINT, b TEXT)")
    con.execute("INSERT INTO p VALUES (?, ?)", (1, "one"))
    con.execute("INSERT INTO p VALUES (:1, :2)", [2, "two"])
    con.execute("INSERT INTO p VALUES ($1, $2)", [3, "three"])
    con.execute("INSERT INTO p VALUES (?2, ?1)", ["four", 4])
    assert con.execute("SELECT b FROM p WHERE a = ?", [4]).fetchone() == ("four",)
    assert con.execute("SELECT count(*) FROM p WHERE b <> '?' AND a > ?", [1]).fetchone() == (3,)
    assert con.execute("SELECT a::text FROM p WHERE a = :1", [2]).fetchone() == ("2",)
    with pytest.raises(basalt.ProgrammingError):
        con.execute("SELECT ? + ?", [1])
    with pytest.raises(ValueError):
        con.execute("SELECT ?", "x")
    with pytest.raises(ValueError):
        con.execute("SELECT ?", [object()])


def test_parameter_types(con):
    con.sql(
        "CREATE TABLE v (b BOOLEAN, i BIGINT, f DOUBLE, s TEXT, y BYTEA, d DATE, ts TIMESTAMP, "
        "m DECIMAL(12, 3), u BIGINT UNSIGNED)"
    )
    row = (
        True, -5, 2.5, "héllo", b"\x00\x01", datetime.date(2001, 2, 3),
        datetime.datetime(2001, 2, 3, 4, 5, 6, 789000), decimal.Decimal("-1234.567"), 2**63 + 1,
    )
    con.execute("INSERT INTO v VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
    assert con.sql("SELECT * FROM v").fetchone() == row
    assert con.execute("SELECT count(*) FROM v WHERE m = ?", [decimal.Decimal("-1234.567")]).fetchone() == (1,)
    assert con.execute("SELECT count(*) FROM v WHERE d = ?", [datetime.date(2001, 2, 3)]).fetchone() == (1,)
    assert con.execute("SELECT ? IS NULL", [None]).fetchone() == (True,)
    # A decimal with more digits than 38 goes as text.
    big = decimal.Decimal("1" * 40)
    assert con.execute("SELECT ?", [big]).fetchone() == (str(big),)


def test_executemany_is_atomic(con):
    con.sql("CREATE TABLE k (id BIGINT PRIMARY KEY, v TEXT)")
    cur = con.executemany("INSERT INTO k VALUES (?, ?)", [(i, str(i)) for i in range(100)])
    assert cur.rowcount == 100
    with pytest.raises(basalt.IntegrityError):
        con.executemany("INSERT INTO k VALUES (?, ?)", [(1000, "a"), (1001, "b"), (5, "dup")])
    assert con.sql("SELECT count(*) FROM k").fetchone() == (100,)


def test_executemany_inserts_take_every_spelling(con):
    # A plain INSERT of parameters loads all rows at once; other forms run row by row.
    # Both give the same rows, casts and defaults.
    con.sql('CREATE TABLE m (id BIGINT, "Name" TEXT, d DATE, x DOUBLE, n INT DEFAULT 7)')
    rows = [(i, f"n{i}", datetime.date(2024, 1, 1 + i), i * 0.5) for i in range(5)]
    assert con.executemany('insert into M (id, "Name", d, x) values (?, ?, ?, ?);', rows).rowcount == 5
    assert con.executemany('INSERT INTO m (id, "Name", d, x) VALUES (?, ?, ?, ? + 1)', rows).rowcount == 5
    # Text for a date and an integer for a double: cast as SQL casts them.
    assert con.executemany("INSERT INTO m (id, d, x) VALUES (?, ?, ?)", [(9, "2024-02-03", 3)]).rowcount == 1
    assert con.executemany("INSERT INTO m VALUES ($1, $2, $3, $4, $5)", [(10, "z", None, 1.0, 1)]).rowcount == 1
    got = con.sql('SELECT id, "Name", d, x, n FROM m ORDER BY id, x').fetchall()
    assert got[:2] == [(0, "n0", datetime.date(2024, 1, 1), 0.0, 7), (0, "n0", datetime.date(2024, 1, 1), 1.0, 7)]
    assert got[-2:] == [(9, None, datetime.date(2024, 2, 3), 3.0, 7), (10, "z", None, 1.0, 1)]
    assert len(got) == 12
    with pytest.raises(basalt.DataError):
        con.executemany("INSERT INTO m (id, x) VALUES (?, ?)", [(11, 1.0), (12, "not a number")])
    with pytest.raises(basalt.ProgrammingError):
        con.executemany("INSERT INTO m (id, nope) VALUES (?, ?)", [(11, 1)])
    assert con.sql("SELECT count(*) FROM m").fetchone() == (12,)
    # Inside a transaction the rows are part of it.
    con.begin()
    con.executemany("INSERT INTO m (id) VALUES (?)", [(20,), (21,)])
    con.rollback()
    assert con.sql("SELECT count(*) FROM m").fetchone() == (12,)


def test_transactions(con):
    con.sql("CREATE TABLE tx (a BIGINT)")
    other = con.duplicate()
    con.begin()
    assert con.in_transaction
    con.execute("INSERT INTO tx VALUES (?)", [1])
    assert con.sql("SELECT count(*) FROM tx").fetchone() == (1,)
    assert other.sql("SELECT count(*) FROM tx").fetchone() == (0,)
    con.rollback()
    assert not con.in_transaction
    assert con.sql("SELECT count(*) FROM tx").fetchone() == (0,)
    con.begin()
    con.execute("INSERT INTO tx VALUES (?)", [2])
    con.commit()
    assert other.sql("SELECT count(*) FROM tx").fetchone() == (1,)
    # commit / rollback without a transaction do nothing (autocommit mode).
    con.commit()
    con.rollback()
    with pytest.raises(basalt.ProgrammingError):
        con.begin()
        con.begin()
    con.rollback()
    con.sql("BEGIN; INSERT INTO tx VALUES (3); COMMIT")
    assert con.sql("SELECT sum(a) FROM tx").fetchone() == (5,)


def test_context_manager_commits_or_rolls_back(tmp_path):
    path = tmp_path / "cm.db"
    with basalt.connect(path) as con:
        con.sql("CREATE TABLE t (a BIGINT)")
        con.begin()
        con.execute("INSERT INTO t VALUES (1)")
    assert con.closed
    with pytest.raises(basalt.InterfaceError):
        con.sql("SELECT 1")
    with pytest.raises(RuntimeError):
        with basalt.connect(path) as con:
            con.begin()
            con.execute("INSERT INTO t VALUES (2)")
            raise RuntimeError("boom")
    with basalt.connect(path) as con:
        assert con.sql("SELECT a FROM t").fetchall() == [(1,)]


def test_errors_are_typed(con):
    con.sql("CREATE TABLE e (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)")
    con.sql("INSERT INTO e VALUES (1, 1)")
    with pytest.raises(basalt.IntegrityError, match="duplicate key"):
        con.sql("INSERT INTO e VALUES (1, 2)")
    with pytest.raises(basalt.ProgrammingError):
        con.sql("SELECT nope FROM e")
    with pytest.raises(basalt.ProgrammingError):
        con.sql("SELEC 1")
    with pytest.raises(basalt.ProgrammingError):
        con.sql("SELECT * FROM missing")
    with pytest.raises(basalt.IntegrityError, match="NOT NULL"):
        con.sql("INSERT INTO e VALUES (2, NULL)")
    con.sql("ALTER TABLE e ADD CONSTRAINT small CHECK (n < 100)")
    with pytest.raises(basalt.IntegrityError, match="check constraint small"):
        con.sql("INSERT INTO e VALUES (3, 100)")
    with pytest.raises(basalt.IntegrityError, match="check constraint small"):
        con.table("e").insert_row(id=4, n=500)
    with pytest.raises(basalt.DataError):
        con.sql("SELECT CAST('x' AS INT)")
    # Nothing of a failed statement was written.
    assert con.sql("SELECT count(*) FROM e").fetchone() == (1,)


def test_locked_database_is_operational_error(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "locked.db"
    basalt.connect(path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         f"import basalt, sys, time; c = basalt.connect({str(path)!r}); print('ready', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(basalt.OperationalError):
            basalt.connect(path, lock_timeout=0)
        ro = basalt.connect(path, read_only=True)
        assert ro.sql("SELECT 1").fetchone() == (1,)
        ro.close()
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_same_file_shares_one_handle(tmp_path):
    path = tmp_path / "shared.db"
    a = basalt.connect(path)
    b = basalt.connect(str(path))
    a.sql("CREATE TABLE s (x BIGINT)")
    b.sql("INSERT INTO s VALUES (1)")
    assert a.sql("SELECT x FROM s").fetchall() == [(1,)]
    a.close()
    assert b.sql("SELECT count(*) FROM s").fetchone() == (1,)
    b.close()
    c = basalt.connect(path)
    assert c.sql("SELECT count(*) FROM s").fetchone() == (1,)
    c.close()


def test_unknown_option_is_refused():
    with pytest.raises(ValueError, match="unknown option"):
        basalt.connect(None, nope=1)
    with pytest.raises(ValueError, match="durability"):
        basalt.connect(None, durability="sometimes")


def test_threads_share_a_connection(con):
    con.sql("CREATE TABLE th (id BIGINT, v DOUBLE)")
    con.insert("th", {"id": list(range(200_000)), "v": [float(i) for i in range(200_000)]})
    errors = []
    results = []

    def work(i):
        try:
            c = con if i % 2 else con.duplicate()
            for _ in range(5):
                results.append(c.execute("SELECT sum(v) FROM th WHERE id % ? = 0", [i + 1]).fetchone()[0])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 30


LONG = "SELECT sum(x) FROM generate_series(1, 1000000000000) AS g(x)"


def test_interrupt_from_another_thread(con):
    timer = threading.Timer(0.2, con.interrupt)
    timer.start()
    with pytest.raises(basalt.OperationalError, match="interrupted"):
        con.sql(LONG)
    timer.join()
    assert con.sql("SELECT 1").fetchone() == (1,)


def test_statement_timeout():
    con = basalt.connect(None, statement_timeout=0.2)
    with pytest.raises(basalt.OperationalError, match="timed out"):
        con.sql(LONG)
    assert con.sql("SELECT 1").fetchone() == (1,)


def test_script_returns_last_result(con):
    r = con.sql("CREATE TABLE sc (a BIGINT); INSERT INTO sc VALUES (1), (2); SELECT sum(a) FROM sc")
    assert r.fetchall() == [(3,)]


def test_persistence(tmp_path):
    path = tmp_path / "p.db"
    con = basalt.connect(path)
    con.sql("CREATE TABLE t (a BIGINT, s TEXT)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"s{i}") for i in range(10)])
    con.close()
    con = basalt.connect(path)
    assert con.sql("SELECT count(*), max(s) FROM t").fetchone() == (10, "s9")
    assert con.tables() == ["t"]


def test_statement_cache_follows_schema_and_data_changes(con):
    with pytest.raises(basalt.ProgrammingError):
        con.sql("SELECT * FROM later")
    con.sql("CREATE TABLE later (a BIGINT)")
    assert con.sql("SELECT * FROM later").fetchall() == []
    other = con.duplicate()
    other.sql("INSERT INTO later VALUES (1)")
    assert con.sql("SELECT * FROM later").fetchall() == [(1,)]
    # Another connection changes the table's shape: the kept statement is prepared again.
    other.sql("ALTER TABLE later ADD COLUMN b TEXT")
    other.sql("INSERT INTO later VALUES (2, 'x')")
    r = con.sql("SELECT * FROM later ORDER BY a")
    assert r.columns == ["a", "b"]
    assert r.fetchall() == [(1, None), (2, "x")]
    assert con.execute("SELECT b FROM later WHERE a = ?", [2]).fetchone() == ("x",)
    other.sql("DROP TABLE later")
    with pytest.raises(basalt.ProgrammingError):
        con.sql("SELECT * FROM later ORDER BY a")
