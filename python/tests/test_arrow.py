"""Arrow in and out: every type through the PyCapsule stream, pandas and polars, inserts."""

import datetime
import decimal

import numpy as np
import pyarrow as pa
import pytest

import basalt


def every_type() -> pa.Table:
    return pa.table(
        {
            "b": pa.array([True, None, False], pa.bool_()),
            "i8": pa.array([-128, None, 127], pa.int8()),
            "i16": pa.array([-1, 2, None], pa.int16()),
            "i32": pa.array([None, -2**31, 2**31 - 1], pa.int32()),
            "i64": pa.array([-2**63, 0, 2**63 - 1], pa.int64()),
            "u8": pa.array([0, 255, None], pa.uint8()),
            "u64": pa.array([0, 2**64 - 1, None], pa.uint64()),
            "f32": pa.array([1.5, None, -0.0], pa.float32()),
            "f64": pa.array([float("inf"), 2.25, None], pa.float64()),
            "s": pa.array(["", "héllo", None], pa.string()),
            "bin": pa.array([b"\x00", None, b"xyz"], pa.binary()),
            "d": pa.array([datetime.date(1969, 12, 31), None, datetime.date(2100, 1, 1)], pa.date32()),
            "ts": pa.array([datetime.datetime(2001, 2, 3, 4, 5, 6, 7), None, datetime.datetime(1960, 1, 1)],
                           pa.timestamp("us")),
            "tz": pa.array([datetime.datetime(2001, 2, 3, tzinfo=datetime.timezone.utc), None, None],
                           pa.timestamp("us", tz="UTC")),
            "dec": pa.array([decimal.Decimal("-1.05"), None, decimal.Decimal("99999.99")], pa.decimal128(7, 2)),
            "vec": pa.array([[1.0, 2.0, 3.0], None, [0.5, -0.5, 0.0]], pa.list_(pa.float32(), 3)),
            "lst": pa.array([[1, 2], [], None], pa.list_(pa.int64())),
            "st": pa.array([{"x": 1, "y": "a"}, None, {"x": None, "y": "c"}],
                           pa.struct([("x", pa.int64()), ("y", pa.string())])),
        }
    )


def test_every_type_round_trips_through_arrow(con):
    t = every_type()
    assert con.insert("all_types", t) == 3
    back = con.sql("SELECT * FROM all_types ORDER BY _id").arrow()
    assert back.schema.names == t.schema.names
    for name in t.schema.names:
        assert back.column(name).type == t.column(name).type, name
        assert back.column(name).to_pylist() == t.column(name).to_pylist(), name


def test_every_type_round_trips_through_tuples(con):
    t = every_type()
    con.insert("all_types", t)
    rows = con.sql("SELECT * FROM all_types ORDER BY _id").fetchall()
    expected = [tuple(r.values()) for r in t.to_pylist()]
    # Tuples carry Python values: a vector is a list, a struct a dict.
    assert rows == expected


def test_result_is_zero_copy_stream(con):
    con.sql("CREATE TABLE z AS SELECT x, x * 2 AS y FROM generate_series(1, 100000) AS g(x)")
    r = con.sql("SELECT * FROM z")
    reader = r.fetch_arrow_reader()
    n = sum(b.num_rows for b in reader)
    assert n == 100000
    # A result can be read again, and by any consumer of the interface.
    assert pa.table(r).num_rows == 100000
    assert pa.RecordBatchReader.from_stream(r).read_all().num_rows == 100000
    assert len(r) == 100000


def test_empty_result_keeps_its_schema(con):
    con.sql("CREATE TABLE e (a BIGINT, b TEXT)")
    t = con.sql("SELECT * FROM e").arrow()
    assert t.num_rows == 0 and t.schema.names == ["a", "b"]
    assert con.sql("SELECT * FROM e").fetchall() == []


def test_pandas_and_polars():
    pd = pytest.importorskip("pandas")
    pl = pytest.importorskip("polars")
    con = basalt.connect()
    con.insert("f", pd.DataFrame({"a": [1, 2, 3], "s": ["x", "y", None], "f": [0.5, None, 2.0]}))
    con.insert("f", pl.DataFrame({"a": [4], "s": ["z"], "f": [1.0]}))
    # A frame's index is not a column.
    con.insert("f", pd.DataFrame({"a": [5], "s": ["w"], "f": [3.0]}, index=[10]))
    df = con.sql("SELECT a, s, f FROM f ORDER BY a").df()
    assert list(df["a"]) == [1, 2, 3, 4, 5]
    assert df["s"].isna().tolist() == [False, False, True, False, False]
    p = con.sql("SELECT a, s FROM f ORDER BY a").pl()
    assert p["s"].to_list() == ["x", "y", None, "z", "w"]
    assert p.height == 5


def test_insert_from_python_rows(con):
    con.sql("CREATE TABLE r (id BIGINT NOT NULL, name TEXT, score DOUBLE, v VECTOR(2))")
    assert con.insert("r", [(1, "a", 0.5, [1.0, 0.0]), (2, "b", None, None)]) == 2
    assert con.insert("r", [{"id": 3, "name": "c"}]) == 1
    assert con.insert("r", {"id": [4, 5], "v": np.array([[0.0, 1.0], [1.0, 1.0]])}) == 2
    assert con.sql("SELECT id, name, score, v FROM r ORDER BY id").fetchall() == [
        (1, "a", 0.5, [1.0, 0.0]),
        (2, "b", None, None),
        (3, "c", None, None),
        (4, None, None, [0.0, 1.0]),
        (5, None, None, [1.0, 1.0]),
    ]
    # A column the table does not have, a value that does not fit, a NULL in a NOT NULL
    # column: refused, nothing written.
    with pytest.raises(ValueError, match="no column 'nope'"):
        con.insert("r", {"id": [9], "nope": [1]})
    with pytest.raises(basalt.DataError):
        con.insert("r", pa.table({"id": ["not a number"]}))
    with pytest.raises(basalt.IntegrityError):
        con.insert("r", pa.table({"id": pa.array([None, 7], pa.int64())}))
    assert con.sql("SELECT count(*) FROM r").fetchone() == (5,)
    with pytest.raises(TypeError):
        con.insert("r", 42)


def test_insert_casts_to_the_table_types(con):
    con.sql("CREATE TABLE c (a INT, s TEXT, d DECIMAL(10, 2))")
    con.insert("c", pa.table({"a": pa.array([1], pa.int64()), "s": pa.array(["x"], pa.large_string()),
                              "d": pa.array([1.25], pa.float64())}))
    assert con.sql("SELECT a, s, d FROM c").fetchone() == (1, "x", decimal.Decimal("1.25"))
    with pytest.raises(basalt.DataError):
        con.insert("c", pa.table({"a": pa.array([2**40], pa.int64())}))


def test_create_table_from_schema(con):
    t = con.create_table("cs", pa.schema([("a", pa.int64()), ("v", pa.list_(pa.float32(), 4))]))
    assert t.schema.field("v").type == pa.list_(pa.float32(), 4)
    assert con.tables() == ["cs"]
    with pytest.raises(basalt.ProgrammingError):
        con.create_table("cs", pa.schema([("a", pa.int64())]))


def test_rows_by_id_through_the_table_api(con):
    con.sql("CREATE TABLE p (name TEXT NOT NULL, age INT, score DOUBLE DEFAULT 1.5)")
    t = con.table("p")
    a = t.insert_row({"name": "ann", "age": 30})
    b = t.insert_row(name="bob", age=41, score=2.0)
    assert b != a and t.count() == 2
    assert t.get(a).fetchall() == [(a, "ann", 30, 1.5)]
    assert t.update(b, age=42) is True
    assert t.update(10**9, age=1) is False
    assert con.sql("SELECT name, age, score FROM p WHERE _id = ?", [b]).fetchone() == ("bob", 42, 2.0)
    with pytest.raises(basalt.IntegrityError):
        t.insert_row(age=5)  # NOT NULL name
    with pytest.raises(basalt.ProgrammingError):
        t.insert_row(nope=1)
    assert t.count() == 2
    assert t.delete([a, 10**9]) == 1
    assert t.delete(a) == 0
    assert t.count() == 1
    # Inside a transaction the row API takes part in it.
    con.begin()
    t.insert_row(name="cy")
    con.rollback()
    assert t.count() == 1


def test_big_insert_goes_to_a_segment(tmp_path):
    con = basalt.connect(tmp_path / "big.db")
    n = 300_000
    con.insert("big", pa.table({"a": np.arange(n), "b": np.random.default_rng(1).random(n)}))
    con.close()
    con = basalt.connect(tmp_path / "big.db")
    assert con.sql("SELECT count(*), sum(a) FROM big").fetchone() == (n, n * (n - 1) // 2)


def test_stream_reads_batches_as_they_are_computed(con):
    reader = con.stream("SELECT x, x * 2 AS y FROM generate_series(1, 10000000) AS g(x)")
    assert reader.schema.names == ["x", "y"]
    first = reader.read_next_batch()
    assert first.num_rows > 0
    # Reading a few batches of ten million rows does not compute the rest.
    total = first.num_rows
    for _ in range(3):
        total += reader.read_next_batch().num_rows
    assert total < 10_000_000
    reader.close()
    con.sql("CREATE TABLE s AS SELECT * FROM generate_series(1, 100000) AS g(x)")
    assert sum(b.num_rows for b in con.stream("SELECT * FROM s WHERE x % 2 = 0")) == 50000
    native = con._native.stream("SELECT 1")
    import pyarrow as pa

    pa.RecordBatchReader.from_stream(native).read_all()
    with pytest.raises(basalt.InterfaceError):
        pa.RecordBatchReader.from_stream(native)
    # Errors while reading carry the engine's message.
    with pytest.raises(Exception, match="(?i)divide by zero"):
        con.stream("SELECT 1 / (x - 5000) FROM s").read_all()


def test_register_queries_python_data_in_place(con):
    con.sql("CREATE TABLE orders (id BIGINT, city TEXT)")
    con.sql("INSERT INTO orders VALUES (1, 'Oslo'), (2, 'Rome'), (3, 'Oslo')")
    con.register("cities", pa.table({"city": ["Oslo", "Rome"], "pop": [700_000, 2_800_000]}))
    q = "SELECT o.id, c.pop FROM orders o JOIN cities c USING (city) ORDER BY o.id"
    assert con.sql(q).fetchall() == [(1, 700_000), (2, 2_800_000), (3, 700_000)]
    # Registering again replaces the data (a kept statement does not see the old one).
    con.register("cities", {"city": ["Oslo"], "pop": [1]})
    assert con.sql(q).fetchall() == [(1, 1), (3, 1)]
    pd = pytest.importorskip("pandas")
    con.register("frame", pd.DataFrame({"x": [1, 2, 3]}))
    assert con.execute("SELECT sum(x) FROM frame WHERE x > ?", [1]).fetchone() == (5,)
    # Connection-local and read-only.
    assert "cities" not in con.tables()
    other = con.duplicate()
    with pytest.raises(basalt.ProgrammingError):
        other.sql("SELECT * FROM cities")
    with pytest.raises(basalt.Error):
        con.sql("INSERT INTO cities VALUES ('Paris', 2)")
    assert con.unregister("cities") is True
    assert con.unregister("cities") is False
    with pytest.raises(basalt.ProgrammingError):
        con.sql(q)
