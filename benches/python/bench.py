"""The cross-engine workload driven from Python: Basalt (the `basalt` package), ApexBase
(its public client, result cache off), DuckDB and SQLite, in one process, on the data and
metrics of `benches/README.md` (ApexBase's own benchmark, fair-play rules applied).

    python benches/python/bench.py --rows 1000000 --output benches/results/DATE-python-1m

Each engine loads the same rows (through its columnar path); every metric materialises its
whole result (a pyarrow Table for the Arrow engines, a list of rows for SQLite); results are
cross-checked between engines (row counts always, values for small results) and a mismatch
is reported in the metric's row. The report has the format of `basalt-bench`.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import pyarrow as pa

CITIES = ["Beijing", "Shanghai", "Guangzhou", "Shenzhen", "Hangzhou", "Nanjing", "Chengdu",
          "Wuhan", "Xian", "Qingdao"]
POPS = [21540000, 24870000, 18680000, 17680000, 10360000, 9490000, 20940000, 13690000,
        13150000, 9480000]
CATEGORIES = ["Electronics", "Clothing", "Food", "Sports", "Books", "Home", "Auto", "Health",
              "Travel", "Gaming"]


def dataset(rows: int, seed: int = 42) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "name": pa.array([f"user_{i}" for i in range(rows)], pa.string()),
        "age": pa.array(rng.integers(18, 81, rows), pa.int64()),
        "score": pa.array(np.round(rng.random(rows) * 100, 2), pa.float64()),
        "city": pa.array(np.array(CITIES, dtype=object)[rng.integers(0, 10, rows)], pa.string()),
        "category": pa.array(np.array(CATEGORIES, dtype=object)[rng.integers(0, 10, rows)], pa.string()),
    })


# ---------------------------------------------------------------------------- engines

class Engine:
    name = ""

    def load(self, data: pa.Table) -> None: ...
    def query(self, sql: str, params: Optional[list] = None) -> Any: ...
    def rows(self, result: Any) -> list[tuple]: ...
    def count(self, result: Any) -> int: ...
    def reopen(self) -> None: ...
    def close(self) -> None: ...
    def version(self) -> str: ...
    # Table name and the _id expression (1-based row id) in this engine's SQL.
    table = "t"
    id_col = "_id"


class Basalt(Engine):
    name = "basalt"

    def __init__(self, root: str) -> None:
        import basalt

        self.mod = basalt
        self.path = os.path.join(root, "basalt.db")
        self.con = basalt.connect(self.path)

    def version(self) -> str:
        return f"basalt {self.mod.__version__} (Python package)"

    def load(self, data: pa.Table) -> None:
        self.con.insert("t", data)
        self.con.insert("meta", pa.table({"city": CITIES, "pop": pa.array(POPS, pa.int64())}))

    def query(self, sql, params=None):
        return self.con.sql(sql, params).arrow()

    def point(self, sql, params):
        return self.con.execute(sql, params).fetchone()

    def write(self, sql, params=None):
        self.con.execute(sql, params)

    def rows(self, r):
        return [tuple(x.values()) for x in r.to_pylist()]

    def count(self, r):
        return r.num_rows

    def reopen(self):
        self.con.close()
        self.con = self.mod.connect(self.path)

    def close(self):
        self.con.close()


class ApexBase(Engine):
    name = "apexbase"
    table = "t"

    def __init__(self, root: str) -> None:
        import apexbase

        self.mod = apexbase
        self.path = os.path.join(root, "apex")
        self.client = apexbase.ApexClient(self.path, enable_cache=False)

    def version(self) -> str:
        from importlib.metadata import version

        return f"ApexBase {version('apexbase')} (enable_cache=False)"

    def load(self, data: pa.Table) -> None:
        self.client.create_table("t")
        self.client.from_pyarrow(data, table_name="t")
        self.client.create_table("meta")
        self.client.from_pyarrow(pa.table({"city": CITIES, "pop": pa.array(POPS, pa.int64())}), table_name="meta")
        self.client.use_table("t")
        self.client.flush()

    def query(self, sql, params=None):
        return self.client.execute(sql, params=params).to_arrow()

    def point(self, sql, params):
        return self.client.execute(sql, params=params).first()

    def write(self, sql, params=None):
        self.client.execute(sql, params=params)

    def rows(self, r):
        return [tuple(x.values()) for x in r.to_pylist()]

    def count(self, r):
        return r.num_rows

    def reopen(self):
        self.client.close()
        self.client = self.mod.ApexClient(self.path, enable_cache=False)
        self.client.use_table("t")

    def close(self):
        self.client.close()


class DuckDB(Engine):
    name = "duckdb"
    id_col = "(rowid + 1)"

    def __init__(self, root: str) -> None:
        import duckdb

        self.mod = duckdb
        self.path = os.path.join(root, "duck.db")
        self.con = duckdb.connect(self.path)
        self.con.execute("SET threads = 2")

    def version(self) -> str:
        return f"DuckDB {self.mod.__version__}"

    def load(self, data: pa.Table) -> None:
        self.con.register("src", data)
        self.con.execute("CREATE TABLE t AS SELECT * FROM src")
        self.con.unregister("src")
        self.con.execute("CREATE TABLE meta (city VARCHAR, pop BIGINT)")
        self.con.executemany("INSERT INTO meta VALUES (?, ?)", list(zip(CITIES, POPS)))
        self.con.execute("CHECKPOINT")

    def query(self, sql, params=None):
        r = self.con.execute(sql, params)
        return r.to_arrow_table() if hasattr(r, "to_arrow_table") else r.fetch_arrow_table()

    def point(self, sql, params):
        return self.con.execute(sql, params).fetchone()

    def write(self, sql, params=None):
        self.con.execute(sql, params)

    def rows(self, r):
        return [tuple(x.values()) for x in r.to_pylist()]

    def count(self, r):
        return r.num_rows

    def reopen(self):
        self.con.close()
        self.con = self.mod.connect(self.path)
        self.con.execute("SET threads = 2")

    def close(self):
        self.con.close()


class SQLite(Engine):
    name = "sqlite"

    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, "sqlite.db")
        self.con = self._open()

    def _open(self):
        con = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=OFF")
        return con

    def version(self) -> str:
        return f"SQLite {sqlite3.sqlite_version}"

    def load(self, data: pa.Table) -> None:
        c = self.con
        c.execute("CREATE TABLE t (_id INTEGER PRIMARY KEY, name TEXT, age INTEGER, score REAL, city TEXT, category TEXT)")
        c.execute("BEGIN")
        cols = [data.column(n).to_pylist() for n in data.column_names]
        c.executemany("INSERT INTO t (name, age, score, city, category) VALUES (?, ?, ?, ?, ?)", zip(*cols))
        c.execute("CREATE TABLE meta (city TEXT, pop INTEGER)")
        c.executemany("INSERT INTO meta VALUES (?, ?)", list(zip(CITIES, POPS)))
        c.execute("COMMIT")

    def query(self, sql, params=None):
        return self.con.execute(sql, params or []).fetchall()

    def point(self, sql, params):
        return self.con.execute(sql, params).fetchone()

    def write(self, sql, params=None):
        self.con.execute(sql, params or [])

    def rows(self, r):
        return list(r)

    def count(self, r):
        return len(r)

    def reopen(self):
        self.con.close()
        self.con = self._open()

    def close(self):
        self.con.close()


# ---------------------------------------------------------------------------- metrics

@dataclass
class Metric:
    id: str
    name: str
    group: str
    # The SQL with `{t}` for the table and `{id}` for the 1-based row id expression.
    sql: str = ""
    mode: str = "median"  # median | micro | cold | once
    params: Optional[Callable[[int], list]] = None  # rotated per iteration
    write: bool = False
    compare: bool = True  # cross-check values (not only row counts)
    ordered: bool = False


def metrics(rows: int) -> list[Metric]:
    ids100 = lambda i: [(i * 7919 + k * 104729) % rows + 1 for k in range(100)]  # noqa: E731
    return [
        Metric("OLAP-1", "COUNT(*)", "aggregation", "SELECT COUNT(*) FROM {t}"),
        Metric("OLAP-2", "SELECT * LIMIT 100 (cold reopen)", "point reads", "SELECT * FROM {t} LIMIT 100", mode="cold", compare=False),
        Metric("OLAP-3", "SELECT * LIMIT 100", "point reads", "SELECT * FROM {t} LIMIT 100", compare=False),
        Metric("OLAP-5", "SELECT * LIMIT 10K", "point reads", "SELECT * FROM {t} LIMIT 10000", compare=False),
        Metric("OLAP-6", "Projection full scan (3 cols)", "filtering", "SELECT name, age, city FROM {t}", compare=False),
        Metric("OLAP-7", "Filtered LIMIT 100 (age>30)", "filtering", "SELECT * FROM {t} WHERE age > 30 LIMIT 100", compare=False),
        Metric("OLAP-9", "Filter (name = 'user_5000')", "filtering", "SELECT name, age, score, city, category FROM {t} WHERE name = 'user_5000'"),
        Metric("OLAP-10", "Filter (age BETWEEN 25 AND 35)", "filtering", "SELECT * FROM {t} WHERE age BETWEEN 25 AND 35", compare=False),
        Metric("OLAP-11", "GROUP BY city (10 groups)", "aggregation", "SELECT city, COUNT(*), AVG(score) FROM {t} GROUP BY city"),
        Metric("OLAP-13", "GROUP BY city ORDER BY count", "aggregation", "SELECT city, COUNT(*) AS cnt FROM {t} GROUP BY city ORDER BY cnt DESC LIMIT 5"),
        Metric("OLAP-15", "GROUP BY + HAVING", "aggregation", "SELECT city, COUNT(*) AS cnt, AVG(score) FROM {t} GROUP BY city HAVING COUNT(*) > 1000"),
        Metric("OLAP-18", "ORDER BY score LIMIT 100", "ordering/window", "SELECT name, score FROM {t} ORDER BY score DESC, name LIMIT 100"),
        Metric("OLAP-20", "Aggregation (5 funcs)", "aggregation", "SELECT COUNT(*), AVG(age), SUM(score), MIN(age), MAX(age) FROM {t}"),
        Metric("OLAP-21", "Filtered aggregation (category)", "aggregation", "SELECT COUNT(*), AVG(score), MAX(score) FROM {t} WHERE category = 'Electronics'"),
        Metric("OLAP-24", "Complex (Filter+Group+Order)", "aggregation", "SELECT city, AVG(score) AS avg_s FROM {t} WHERE age BETWEEN 25 AND 50 GROUP BY city ORDER BY avg_s DESC LIMIT 5"),
        Metric("OLAP-25", "SELECT * -> pyarrow (full scan, 1M rows)", "point reads", "SELECT name, age, score, city, category FROM {t}", compare=False),
        Metric("OLAP-26", "GROUP BY city,category (100 grp)", "aggregation", "SELECT city, category, COUNT(*), AVG(score) FROM {t} GROUP BY city, category"),
        Metric("OLAP-27", "LIKE filter (name LIKE user_1%)", "filtering", "SELECT * FROM {t} WHERE name LIKE 'user_1%'", compare=False),
        Metric("OLAP-28", "Multi-cond (age>30 AND score>50)", "filtering", "SELECT * FROM {t} WHERE age > 30 AND score > 50.0", compare=False),
        Metric("OLAP-30", "COUNT(DISTINCT city)", "aggregation", "SELECT COUNT(DISTINCT city) FROM {t}"),
        Metric("OLAP-32", "IN filter (city IN 3 cities)", "filtering", "SELECT * FROM {t} WHERE city IN ('Beijing','Shanghai','Guangzhou')", compare=False),
        Metric("OLAP-37", "Window ROW_NUMBER PARTITION BY city", "ordering/window", "SELECT name, city, score, ROW_NUMBER() OVER (PARTITION BY city ORDER BY score DESC, name) AS rn FROM {t} ORDER BY city, rn LIMIT 1000"),
        Metric("OLAP-38", "JOIN GROUP BY ORDER LIMIT", "joins", "SELECT b.city, COUNT(*) AS c FROM {t} b JOIN meta m ON b.city = m.city GROUP BY b.city ORDER BY c DESC LIMIT 5"),
        Metric("OLAP-39", "LEFT JOIN COUNT", "joins", "SELECT COUNT(*) AS c FROM {t} b LEFT JOIN meta m ON b.city = m.city"),
        Metric("OLAP-47", "IN subquery COUNT", "subqueries", "SELECT COUNT(*) AS c FROM {t} WHERE city IN (SELECT city FROM meta WHERE pop > 15000000)"),
        Metric("OLAP-49", "Derived table GROUP BY", "subqueries", "SELECT city, cnt FROM (SELECT city, COUNT(*) AS cnt FROM {t} GROUP BY city) d ORDER BY cnt DESC LIMIT 5"),
        Metric("OLAP-51", "CASE aggregate GROUP BY", "aggregation", "SELECT city, COUNT(CASE WHEN age > 40 THEN 1 END) AS c FROM {t} GROUP BY city ORDER BY city"),
        Metric("OLAP-56", "Deep offset", "ordering/window", "SELECT name, age FROM {t} ORDER BY age, name LIMIT 100 OFFSET 100000"),
        Metric("OLAP-61", "DISTINCT (city, category)", "aggregation", "SELECT DISTINCT city, category FROM {t} ORDER BY city, category"),
        Metric("OLAP-8", "LIMIT 100 OFFSET 10K", "point reads", "SELECT * FROM {t} LIMIT 100 OFFSET 10000", compare=False),
        Metric("OLAP-12", "GROUP BY category (10 groups)", "aggregation", "SELECT category, COUNT(*), AVG(score) FROM {t} GROUP BY category"),
        Metric("OLAP-19", "ORDER BY score ASC LIMIT 100", "ordering/window", "SELECT name, score FROM {t} ORDER BY score ASC, name LIMIT 100"),
        Metric("OLAP-22", "Filtered aggregation (city)", "aggregation", "SELECT COUNT(*), AVG(score), MAX(score) FROM {t} WHERE city = 'Beijing'"),
        Metric("OLAP-23", "COUNT WHERE category", "aggregation", "SELECT COUNT(*) FROM {t} WHERE category = 'Electronics'"),
        Metric("OLAP-29", "ORDER BY city, score DESC LIMIT 100", "ordering/window", "SELECT name, city, score FROM {t} ORDER BY city ASC, score DESC, name LIMIT 100"),
        Metric("OLAP-31", "COUNT(DISTINCT category)", "aggregation", "SELECT COUNT(DISTINCT category) FROM {t}"),
        Metric("OLAP-33", "Numeric IN (age IN 9 values)", "filtering", "SELECT * FROM {t} WHERE age IN (20,25,30,35,40,45,50,55,60)", compare=False),
        Metric("OLAP-34", "OR cross-col (age=25 OR city=BJ)", "filtering", "SELECT * FROM {t} WHERE age = 25 OR city = 'Beijing'", compare=False),
        Metric("OLAP-35", "Boolean filter + GROUP + HAVING + top-k", "aggregation", "SELECT city, COUNT(*) AS n, AVG(score) AS av FROM {t} WHERE (city IN ('Beijing','Shanghai','Guangzhou') OR age IN (33,44,55)) AND score >= 40 GROUP BY city HAVING COUNT(*) > 100 ORDER BY n DESC, city LIMIT 5"),
        Metric("OLAP-36", "Numeric OR (age=20|30|40|50)", "filtering", "SELECT * FROM {t} WHERE age = 20 OR age = 30 OR age = 40 OR age = 50", compare=False),
        Metric("OLAP-40", "LEFT JOIN extra ON predicate", "joins", "SELECT COUNT(*) AS c FROM {t} b LEFT JOIN meta m ON b.city = m.city AND m.pop > 15000000"),
        Metric("OLAP-42", "CROSS JOIN COUNT", "joins", "SELECT COUNT(*) AS c FROM {t} b CROSS JOIN meta m WHERE b.age < 20 AND m.pop > 0"),
        Metric("OLAP-43", "UNION ALL (ordered)", "set ops", "SELECT city FROM {t} WHERE age = 25 UNION ALL SELECT city FROM {t} WHERE age = 26 ORDER BY city LIMIT 100"),
        Metric("OLAP-44", "UNION DISTINCT (ordered)", "set ops", "SELECT city FROM {t} WHERE age = 25 UNION SELECT city FROM {t} WHERE age = 26 ORDER BY city"),
        Metric("OLAP-45", "INTERSECT (ordered)", "set ops", "SELECT city FROM {t} WHERE age BETWEEN 20 AND 30 INTERSECT SELECT city FROM {t} WHERE age BETWEEN 25 AND 35 ORDER BY city"),
        Metric("OLAP-46", "EXCEPT (ordered)", "set ops", "SELECT city FROM {t} WHERE age BETWEEN 20 AND 30 EXCEPT SELECT city FROM {t} WHERE age BETWEEN 25 AND 35 ORDER BY city"),
        Metric("OLAP-48", "EXISTS subquery COUNT", "subqueries", "SELECT COUNT(*) AS c FROM {t} b WHERE EXISTS (SELECT 1 FROM meta m WHERE m.city = b.city AND m.pop > 15000000)"),
        Metric("OLAP-50", "CTE with AVG filter", "subqueries", "WITH c AS (SELECT city, AVG(score) AS av FROM {t} GROUP BY city) SELECT city FROM c WHERE av > 50 ORDER BY av DESC LIMIT 5", compare=False),
        Metric("OLAP-53", "Numeric functions", "expressions", "SELECT ROUND(score, 0) AS r, ABS(age - 40) AS a, FLOOR(score) AS f, CEIL(score) AS c FROM {t} WHERE age BETWEEN 30 AND 40 LIMIT 1000", compare=False),
        Metric("OLAP-54", "COALESCE/NULLIF filter", "expressions", "SELECT COUNT(*) AS c FROM {t} WHERE COALESCE(NULLIF(category, 'Books'), 'none') = 'Books'"),
        Metric("OLAP-55", "NOT filter", "filtering", "SELECT COUNT(*) AS c FROM {t} WHERE age NOT BETWEEN 20 AND 40 AND name NOT LIKE 'user_5%'"),
        Metric("OLAP-57", "ORDER BY expression (LENGTH)", "ordering/window", "SELECT name FROM {t} ORDER BY LENGTH(name) DESC, age, name LIMIT 100"),
        Metric("OLAP-59", "Window RANK (partitioned)", "ordering/window", "SELECT city, RANK() OVER (PARTITION BY city ORDER BY score DESC) AS rk FROM {t} LIMIT 1000", compare=False),
        Metric("OLAP-62", "GROUP BY 2 cols + HAVING", "aggregation", "SELECT city, category, COUNT(*) AS c FROM {t} GROUP BY city, category HAVING COUNT(*) > 2000 ORDER BY city, category LIMIT 20"),
        Metric("OLTP-8", "Retrieve 10 ids (projected)", "point reads", "SELECT name, age, score FROM {t} WHERE {id} IN ({ids})", params=lambda i: [(i * 7919 + k * 104729) % rows + 1 for k in range(10)]),
        Metric("OLTP-10", "SELECT 3 cols LIMIT 100", "point reads", "SELECT name, age, city FROM {t} LIMIT 100", compare=False),
        Metric("OLTP-11", "String equality (projected)", "point reads", "SELECT age, score, city FROM {t} WHERE name = 'user_5000'"),
        Metric("OLTP-12", "City filter LIMIT 100", "point reads", "SELECT name, age FROM {t} WHERE city = 'Beijing' LIMIT 100", compare=False),
        Metric("OLTP-17", "UPDATE missing id", "DML", "UPDATE {t} SET score = 77.0 WHERE {id} = ?", mode="micro", write=True, params=lambda i: [rows + 100_000_000]),
        Metric("OLTP-21", "DELETE missing id", "DML", "DELETE FROM {t} WHERE {id} = ?", mode="micro", write=True, params=lambda i: [rows + 100_000_000]),
        Metric("OLTP-2", "Point lookup (SQL by id, ? parameter)", "point reads", "SELECT name, age, score, city, category FROM {t} WHERE {id} = ?", mode="micro", params=lambda i: [(i * 7919) % rows + 1]),
        Metric("OLTP-3", "Retrieve many (100 ids)", "point reads", "SELECT name, age, score FROM {t} WHERE {id} IN ({ids})", params=ids100),
        Metric("OLTP-5", "Point lookup (projected SQL)", "point reads", "SELECT name, age, score FROM {t} WHERE {id} = ?", mode="micro", params=lambda i: [(i * 104729) % rows + 1]),
        Metric("OLTP-13", "Insert 1 row (? parameters)", "DML", "INSERT INTO {t} (name, age, score, city, category) VALUES (?, ?, ?, ?, ?)", mode="micro", write=True, params=lambda i: [f"oltp_{i}", 31, 77.0, "Beijing", "Books"]),
        Metric("OLTP-16", "UPDATE by id", "DML", "UPDATE {t} SET score = ? WHERE {id} = ?", mode="micro", write=True, params=lambda i: [float(i % 100), (i * 7919) % rows + 1]),
        Metric("OLTP-23", "UPDATE rows (age=25)", "DML", "UPDATE {t} SET score = 50.0 WHERE age = 25", write=True),
    ]


# ---------------------------------------------------------------------------- timing

def sql_for(m: Metric, e: Engine, params: Optional[list]) -> tuple[str, Optional[list]]:
    sql = m.sql
    if "{ids}" in sql:
        # An IN list of literals (every engine's own way to take 100 ids).
        sql = sql.replace("{ids}", ", ".join(str(i) for i in params))
        params = None
    if e.name == "duckdb" and "{id}" in sql and params is not None:
        # DuckDB's rowid is 0-based.
        sql = sql.replace("{id} = ?", "rowid = ?")
        params = [p - 1 if j == len(params) - 1 else p for j, p in enumerate(params)]
    return sql.replace("{t}", e.table).replace("{id}", e.id_col), params


def run_once(m: Metric, e: Engine, i: int) -> tuple[float, Any]:
    params = m.params(i) if m.params else None
    sql, params = sql_for(m, e, params)
    if m.mode == "cold":
        e.reopen()
        gc.collect()
    t0 = time.perf_counter()
    if m.write:
        e.write(sql, params)
        r = None
    elif m.mode == "micro":
        r = e.point(sql, params)
    else:
        r = e.query(sql, params)
    return time.perf_counter() - t0, r


def measure(m: Metric, e: Engine, warmup: int, iters: int) -> tuple[float, Any]:
    if m.mode == "micro":
        # Per-call median over samples of at least 2 ms.
        calls = 1
        i = 0
        while True:
            t0 = time.perf_counter()
            for _ in range(calls):
                run_once(m, e, i)
                i += 1
            if time.perf_counter() - t0 >= 0.002 or calls >= 100000:
                break
            calls *= 4
        samples = []
        for _ in range(iters):
            t0 = time.perf_counter()
            for _ in range(calls):
                run_once(m, e, i)
                i += 1
            samples.append((time.perf_counter() - t0) / calls)
        return statistics.median(samples), run_once(m, e, 0)[1]
    for w in range(warmup):
        run_once(m, e, w)
    samples = []
    last = None
    for k in range(iters):
        dt, last = run_once(m, e, warmup + k)
        samples.append(dt)
    return statistics.median(samples), last


def canonical(rows: list[tuple]) -> list[tuple]:
    def cell(v):
        if isinstance(v, float):
            return float(f"{v:.6g}")
        if isinstance(v, (np.integer,)):
            return int(v)
        return v
    return sorted((tuple(cell(v) for v in r) for r in rows), key=repr)


def check(m: Metric, results: dict[str, Any], engines: dict[str, Engine]) -> Optional[str]:
    if m.write:
        return None
    counts = {}
    for n, r in results.items():
        if r is None:
            continue
        if m.mode == "micro":
            counts[n] = 0 if r is None else 1
        else:
            counts[n] = engines[n].count(r)
    if len(set(counts.values())) > 1:
        return "row counts differ: " + ", ".join(f"{n} {c}" for n, c in counts.items())
    if not m.compare or m.mode == "micro":
        return None
    canon = {}
    order = None
    if isinstance(results.get("basalt"), pa.Table):
        order = results["basalt"].column_names
    for n, r in results.items():
        if isinstance(r, pa.Table) and order and sorted(r.column_names) == sorted(order) and r.column_names != order:
            # Same columns in another order (ApexBase orders projections its own way).
            r = r.select(order)
        rows = engines[n].rows(r)
        if len(rows) > 1000:
            return None
        canon[n] = canonical(rows)
    base = canon.get("basalt")
    bad = [n for n, c in canon.items() if c != base]
    return ("values differ from basalt's: " + ", ".join(bad)) if bad else None


# ---------------------------------------------------------------------------- report

def fmt(secs: Optional[float]) -> str:
    if secs is None:
        return "—"
    if secs >= 1:
        return f"{secs:.2f} s"
    if secs >= 1e-3:
        return f"{secs * 1e3:.2f} ms"
    return f"{secs * 1e6:.1f} µs"


def machine() -> str:
    cpu = platform.processor() or "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = os.cpu_count()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {cores} cores, {mem:.0f} GiB"


def git_rev() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
        return rev + (" (dirty)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--engines", default="basalt,apexbase,duckdb,sqlite")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--only", default="", help="comma-separated metric ids")
    ap.add_argument("--output", required=True, help="path without extension: writes .md and .json")
    args = ap.parse_args()

    root = tempfile.mkdtemp(prefix="basalt-pybench-")
    data = dataset(args.rows)
    classes = {"basalt": Basalt, "apexbase": ApexBase, "duckdb": DuckDB, "sqlite": SQLite}
    engines: dict[str, Engine] = {}
    loads: dict[str, float] = {}
    for name in args.engines.split(","):
        e = classes[name](root)
        t0 = time.perf_counter()
        e.load(data)
        loads[name] = time.perf_counter() - t0
        engines[name] = e
        print(f"loaded {name} in {loads[name]:.2f} s", file=sys.stderr)

    out = []
    out.append({"id": "OLTP-1", "name": "Bulk load (N rows, columnar path)", "group": "load", "mode": "once",
                "engines": {n: {"secs": s} for n, s in loads.items()}, "mismatch": None})
    only = set(filter(None, args.only.split(",")))
    for m in metrics(args.rows):
        if only and m.id not in only:
            continue
        res: dict[str, Any] = {}
        secs: dict[str, Optional[float]] = {}
        errors: dict[str, str] = {}
        for n, e in engines.items():
            try:
                secs[n], res[n] = measure(m, e, args.warmup, args.iters)
            except Exception as ex:  # noqa: BLE001 (reported as N/A with its reason)
                secs[n], errors[n] = None, f"{type(ex).__name__}: {ex}"[:200]
        mismatch = check(m, {n: r for n, r in res.items()}, engines)
        if errors:
            mismatch = "; ".join([mismatch] if mismatch else [] + [f"{n} failed: {x}" for n, x in errors.items()])
        print(f"{m.id:8} " + "  ".join(f"{n} {fmt(s)}" for n, s in secs.items()) + (f"  !! {mismatch}" if mismatch else ""), file=sys.stderr)
        out.append({"id": m.id, "name": m.name, "group": m.group, "mode": m.mode,
                    "engines": {n: {"secs": s} for n, s in secs.items()}, "mismatch": mismatch})
    for e in engines.values():
        e.close()
    shutil.rmtree(root, ignore_errors=True)

    names = list(engines)
    for row in out:
        b = row["engines"].get("basalt", {}).get("secs")
        peers = [v["secs"] for n, v in row["engines"].items() if n != "basalt" and v["secs"] is not None]
        if b is None or not peers:
            row["ratio"], row["verdict"] = None, None
            continue
        r = b / min(peers)
        row["ratio"] = r
        row["verdict"] = "win" if r < 0.98 else ("tie" if r <= 1.02 else "loss")
        ax = row["engines"].get("apexbase", {}).get("secs")
        row["vs_apexbase"] = None if ax is None else b / ax
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "git": git_rev(),
        "python": platform.python_version(),
        "versions": ", ".join(e.version() for e in engines.values()),
        "command": "python " + " ".join(sys.argv),
        "rows": str(args.rows),
        "timing": f"{args.warmup} warm-up + {args.iters} timed iterations, median; micro-operations: per-call median of samples ≥ 2 ms; every result materialised (pyarrow Table, or rows for SQLite and point lookups)",
        "durability": "default tier of each engine (Basalt process-safe WAL, ApexBase 'fast', DuckDB WAL, SQLite WAL + synchronous=OFF)",
    }
    ranked = [r for r in out if r.get("verdict")]
    wins = sum(r["verdict"] == "win" for r in ranked)
    ties = sum(r["verdict"] == "tie" for r in ranked)
    vs_apex = [r for r in out if r.get("vs_apexbase") is not None]
    ahead = sum(r["vs_apexbase"] < 1 for r in vs_apex)
    lines = ["# Basalt cross-engine benchmark from Python", ""]
    lines += [f"- {k}: {v}" for k, v in meta.items()]
    lines += ["", "## Scoreboard", "",
              f"Basalt vs the best other engine per metric (win: ratio < 0.98; tie: within ±2%): **{wins} wins, {ties} ties, {len(ranked) - wins - ties} losses** over {len(ranked)} metrics.",
              "",
              f"Basalt vs ApexBase alone: Basalt faster on **{ahead} of {len(vs_apex)}** metrics.",
              "", "| Group | Metrics | Geometric mean Basalt / best |", "|---|--:|--:|"]
    groups: dict[str, list[float]] = {}
    for r in ranked:
        groups.setdefault(r["group"], []).append(r["ratio"])
    for g, rs in groups.items():
        lines.append(f"| {g} | {len(rs)} | {math.exp(sum(map(math.log, rs)) / len(rs)):.3f} |")
    lines += ["", "## Metrics", "",
              "| Metric | Name | Mode | " + " | ".join(names) + " | Basalt / best | Basalt / ApexBase | |",
              "|---|---|---|" + "--:|" * len(names) + "--:|--:|---|"]
    for r in out:
        cells = [fmt(r["engines"].get(n, {}).get("secs")) for n in names]
        ratio = "—" if r.get("ratio") is None else f"{r['ratio']:.3f}"
        va = "—" if r.get("vs_apexbase") is None else f"{r['vs_apexbase']:.3f}"
        verdict = r.get("verdict") or ""
        if verdict == "loss":
            verdict = "**loss**"
        if r["mismatch"]:
            verdict += f" (check: {r['mismatch']})"
        lines.append(f"| {r['id']} | {r['name']} | {r['mode']} | " + " | ".join(cells) + f" | {ratio} | {va} | {verdict} |")
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(args.output + ".json", "w") as f:
        json.dump({"meta": meta, "metrics": out}, f, indent=1)
    print("\n".join(lines[:20]), file=sys.stderr)


if __name__ == "__main__":
    main()
