#!/usr/bin/env python3
"""Generates sqllogictest files whose expected results are SQLite's.

Random queries (seeded, so the output is reproducible) over two small tables with NULLs:
expressions, three-valued conditions, aggregates, GROUP BY / HAVING, joins, IN / NOT IN /
EXISTS / scalar subqueries, set operations, DISTINCT, ORDER BY … LIMIT and text functions.
Each query runs in SQLite (Python's sqlite3) and in Basalt (the `basalt` binary given);
a record is written only when both agree, and every disagreement is listed in
`sqlite-mismatches.txt` in the system temp directory with both answers, for triage: they are
Basalt's gaps (or a dialect difference the generator should avoid), not expected results.

Usage: generate_sqlite_conformance.py BASALT_BINARY OUT_DIR [QUERIES_PER_FAMILY]
"""

import os
import random
import sqlite3
import subprocess
import sys
import tempfile

SEED = 20261205
COLS1 = ["a", "b", "c", "d", "e"]
WORDS = ["apple", "banana", "cherry", "date", "fig", "grape", "kiwi", "lemon", "", "Mango"]


def setup_rows(rng):
    t1 = []
    for _ in range(30):
        t1.append(tuple(None if rng.random() < 0.12 else rng.randint(-5, 20) for _ in COLS1))
    t2 = []
    for _ in range(20):
        x = None if rng.random() < 0.1 else rng.randint(0, 12)
        y = None if rng.random() < 0.1 else rng.randint(-10, 30)
        s = None if rng.random() < 0.1 else rng.choice(WORDS)
        t2.append((x, y, s))
    return t1, t2


def lit(v):
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return str(v)


def setup_sql(t1, t2):
    out = [
        "CREATE TABLE t1 (a INT, b INT, c INT, d INT, e INT)",
        "INSERT INTO t1 VALUES " + ", ".join("(" + ", ".join(map(lit, r)) + ")" for r in t1),
        "CREATE TABLE t2 (x INT, y INT, s TEXT)",
        "INSERT INTO t2 VALUES " + ", ".join("(" + ", ".join(map(lit, r)) + ")" for r in t2),
    ]
    return out


class Gen:
    def __init__(self, rng):
        self.r = rng

    def col(self, cols):
        return self.r.choice(cols)

    def expr(self, cols, depth=2):
        r = self.r
        k = r.randint(0, 9 if depth > 0 else 2)
        if k <= 1:
            return self.col(cols)
        if k == 2:
            return str(r.randint(-3, 15))
        if k in (3, 4):
            op = r.choice(["+", "-", "*"] if depth > 1 else ["+", "-"])
            return f"({self.expr(cols, depth - 1)} {op} {self.expr(cols, depth - 1)})"
        if k == 5:
            return f"abs({self.expr(cols, depth - 1)})"
        if k == 6:
            return (f"CASE WHEN {self.cond(cols, depth - 1)} THEN {self.expr(cols, depth - 1)} "
                    f"ELSE {self.expr(cols, depth - 1)} END")
        if k == 7:
            return f"coalesce({self.expr(cols, depth - 1)}, {self.expr(cols, depth - 1)})"
        if k == 8:
            return f"nullif({self.col(cols)}, {r.randint(0, 10)})"
        return f"(- {self.expr(cols, depth - 1)})"

    def cond(self, cols, depth=1):
        r = self.r
        k = r.randint(0, 8 if depth > 0 else 4)
        e = lambda: self.expr(cols, max(depth - 1, 0))
        if k <= 1:
            return f"{e()} {r.choice(['=', '<>', '<', '<=', '>', '>='])} {e()}"
        if k == 2:
            return f"{self.col(cols)} IS {r.choice(['', 'NOT '])}NULL"
        if k == 3:
            lo = r.randint(-3, 10)
            return f"{e()} {r.choice(['', 'NOT '])}BETWEEN {lo} AND {lo + r.randint(0, 10)}"
        if k == 4:
            vals = [str(r.randint(-2, 15)) for _ in range(r.randint(1, 4))]
            if r.random() < 0.3:
                vals.append("NULL")
            return f"{self.col(cols)} {r.choice(['', 'NOT '])}IN ({', '.join(vals)})"
        if k == 5:
            return f"NOT ({self.cond(cols, depth - 1)})"
        return (f"({self.cond(cols, depth - 1)} {r.choice(['AND', 'OR'])} "
                f"{self.cond(cols, depth - 1)})")

    # Query families: each returns SQL text.
    def select_expr(self):
        n = self.r.randint(1, 3)
        items = ", ".join(self.expr(COLS1) for _ in range(n))
        where = f" WHERE {self.cond(COLS1)}" if self.r.random() < 0.7 else ""
        return f"SELECT {items} FROM t1{where}"

    def aggregate(self):
        r = self.r
        e = self.expr(COLS1, 1)
        aggs = r.sample([f"count(*)", f"count({self.col(COLS1)})", f"sum({e})",
                         f"min({e})", f"max({e})", f"count(DISTINCT {self.col(COLS1)})"],
                        r.randint(1, 3))
        where = f" WHERE {self.cond(COLS1)}" if r.random() < 0.5 else ""
        if r.random() < 0.5:
            g = self.col(COLS1)
            having = f" HAVING count(*) {r.choice(['>', '>=', '<'])} {r.randint(1, 3)}" \
                if r.random() < 0.4 else ""
            return f"SELECT {g}, {', '.join(aggs)} FROM t1{where} GROUP BY {g}{having}"
        return f"SELECT {', '.join(aggs)} FROM t1{where}"

    def join(self):
        r = self.r
        kind = r.choice(["JOIN", "LEFT JOIN", "JOIN"])
        on = f"t1.{self.col(COLS1)} = t2.x"
        if r.random() < 0.3:
            on += f" AND t2.y {r.choice(['<', '>'])} t1.{self.col(COLS1)}"
        where = ""
        if r.random() < 0.5:
            where = f" WHERE {self.cond(['t1.' + c for c in COLS1] + ['t2.y'])}"
        cols = f"t1.{self.col(COLS1)}, t2.y, t2.s"
        return f"SELECT {cols} FROM t1 {kind} t2 ON {on}{where}"

    def subquery(self):
        r = self.r
        c = self.col(COLS1)
        k = r.randint(0, 6)
        inner_where = f" WHERE {self.cond(['x', 'y'])}" if r.random() < 0.5 else ""
        if k == 0:
            w = f"{c} {r.choice(['', 'NOT '])}IN (SELECT x FROM t2{inner_where})"
        elif k == 1:
            w = f"{r.choice(['', 'NOT '])}EXISTS (SELECT 1 FROM t2 WHERE t2.x = t1.{c})"
        elif k == 2:
            w = f"{c} > (SELECT {r.choice(['max', 'min', 'count'])}(y) FROM t2{inner_where})"
        elif k == 3:
            return (f"SELECT {c}, (SELECT count(*) FROM t2 WHERE t2.x = t1.{c}) FROM t1")
        elif k == 4:
            return (f"SELECT {c}, (SELECT max(y) FROM t2 WHERE t2.x = t1.{c}) FROM t1 "
                    f"WHERE {self.cond(COLS1)}")
        elif k == 5:
            # Correlated by a comparison other than equality (SQLite's own test shape).
            return (f"SELECT {c}, (SELECT count(*) FROM t1 AS z WHERE z.{self.col(COLS1)} "
                    f"< t1.{c}) FROM t1")
        else:
            w = (f"EXISTS (SELECT 1 FROM t2 WHERE t2.x = t1.{c} AND t2.y "
                 f"{r.choice(['<', '>'])} t1.{self.col(COLS1)})")
        return f"SELECT {self.col(COLS1)}, {c} FROM t1 WHERE {w}"

    def setop(self):
        r = self.r
        op = r.choice(["UNION", "UNION ALL", "EXCEPT", "INTERSECT"])
        a = f"SELECT {self.col(COLS1)} FROM t1 WHERE {self.cond(COLS1, 0)}"
        b = f"SELECT {r.choice(['x', 'y'])} FROM t2 WHERE {self.cond(['x', 'y'], 0)}"
        return f"{a} {op} {b}"

    def ordered(self):
        r = self.r
        c1, c2 = r.sample(COLS1, 2)
        dirs = [r.choice(["ASC", "DESC"]) for _ in range(2)]
        nulls = [r.choice(["NULLS FIRST", "NULLS LAST"]) for _ in range(2)]
        distinct = "DISTINCT " if r.random() < 0.3 else ""
        return (f"SELECT {distinct}{c1}, {c2} FROM t1 ORDER BY {c1} {dirs[0]} {nulls[0]}, "
                f"{c2} {dirs[1]} {nulls[1]} LIMIT {r.randint(1, 12)}")

    def text(self):
        r = self.r
        fns = ["s", "length(s)", "upper(s)", "lower(s)", "substr(s, 2, 3)", "s || '-'",
               "replace(s, 'a', 'o')", "trim(' ' || s || ' ')", "coalesce(s, 'none')",
               "CASE WHEN s LIKE '%an%' THEN 1 ELSE 0 END", "length(s) + x"]
        items = ", ".join(r.sample(fns, r.randint(1, 3)))
        k = r.randint(0, 3)
        where = [f" WHERE s LIKE '{r.choice(['%a%', 'b%', '%e', '_i%', '%'])}'",
                 f" WHERE s IN ('apple', 'kiwi', 'Mango', 'nope')",
                 f" WHERE s > '{r.choice(WORDS)}'", ""][k]
        return f"SELECT {items} FROM t2{where}"





    def division(self):
        r = self.r
        # Integer division and remainder truncate toward zero in both engines; a zero
        # divisor is NULL in SQLite and an error in Basalt, so divisors go through nullif.
        items = []
        for _ in range(r.randint(1, 3)):
            op = r.choice(["/", "%"])
            items.append(f"{self.expr(COLS1, 1)} {op} nullif({self.col(COLS1)}, 0)")
        where = f" WHERE {self.cond(COLS1)}" if r.random() < 0.5 else ""
        return f"SELECT {', '.join(items)} FROM t1{where}"

    def window(self):
        r = self.r
        part = self.col(COLS1)
        # Order by every column so that the frame order is total (rows tie otherwise).
        order = ", ".join(f"{c} {r.choice(['ASC', 'DESC'])} NULLS FIRST" for c in COLS1)
        fn = r.choice(["row_number()", "rank()", "dense_rank()", f"sum({self.col(COLS1)})",
                       f"count({self.col(COLS1)})", f"max({self.col(COLS1)})",
                       f"lag({self.col(COLS1)})", f"lead({self.col(COLS1)}, 2)",
                       f"first_value({self.col(COLS1)})"])
        frame = r.choice(["", " ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING",
                          " ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"])
        if fn.split("(")[0] in ("row_number", "rank", "dense_rank", "lag", "lead"):
            frame = ""
        over = (f"OVER (PARTITION BY {part} ORDER BY {order}{frame})" if r.random() < 0.6
                else f"OVER (ORDER BY {order}{frame})")
        return f"SELECT {', '.join(COLS1)}, {fn} {over} FROM t1"

    def grouped(self):
        r = self.r
        g = self.expr(COLS1, 1)
        aggs = r.sample(["count(*)", f"sum({self.col(COLS1)})", f"min({self.expr(COLS1, 1)})",
                         f"max({self.col(COLS1)})", f"count(DISTINCT {self.col(COLS1)})",
                         f"sum(CASE WHEN {self.cond(COLS1, 0)} THEN 1 ELSE 0 END)"],
                        r.randint(1, 3))
        having = ""
        if r.random() < 0.6:
            having = (f" HAVING {r.choice(['count(*)', 'sum(' + self.col(COLS1) + ')', 'min(' + self.col(COLS1) + ')'])} "
                      f"{r.choice(['>', '<', '>=', '<>'])} {r.randint(-2, 20)}")
        return f"SELECT {g}, {', '.join(aggs)} FROM t1 GROUP BY {g}{having}"

    def outer(self):
        r = self.r
        c = self.col(COLS1)
        k = r.randint(0, 3)
        if k == 0:
            return f"SELECT t1.{c}, t2.s FROM t1 LEFT JOIN t2 ON t2.x = t1.{c} WHERE t2.x IS NULL"
        if k == 1:
            return (f"SELECT t2.x, count(t1.{c}), sum(t1.{self.col(COLS1)}) FROM t2 LEFT JOIN t1 "
                    f"ON t1.{c} = t2.x GROUP BY t2.x")
        if k == 2:
            return (f"SELECT t1.{c}, t2.y FROM t1 FULL JOIN t2 ON t1.{c} = t2.y "
                    f"WHERE {r.choice(['t1.' + c + ' IS NULL', 't2.y IS NULL', 't1.' + c + ' > 5'])}")
        return (f"SELECT t1.{c}, coalesce(t2.s, 'none') FROM t1 LEFT JOIN t2 ON t2.x = t1.{c} "
                f"AND t2.y > {r.randint(-5, 20)}")

    def cte(self):
        r = self.r
        c1, c2 = r.sample(COLS1, 2)
        k = r.randint(0, 2)
        if k == 0:
            return (f"WITH w AS (SELECT {c1} AS p, {self.expr(COLS1, 1)} AS q FROM t1 WHERE "
                    f"{self.cond(COLS1, 0)}) SELECT p, q FROM w WHERE q IS NOT NULL")
        if k == 1:
            return (f"WITH g AS (SELECT {c1} AS k, count(*) AS n FROM t1 GROUP BY {c1}) "
                    f"SELECT k, n FROM g WHERE n {r.choice(['>', '='])} {r.randint(1, 2)}")
        return (f"WITH a AS (SELECT {c1} AS v FROM t1), b AS (SELECT x AS v FROM t2) "
                f"SELECT v FROM a WHERE v {r.choice(['', 'NOT '])}IN (SELECT v FROM b WHERE v "
                f"IS NOT NULL)")


FAMILIES = ["select_expr", "aggregate", "join", "subquery", "setop", "ordered", "text",
            "division", "window", "grouped", "outer", "cte"]


def norm(v):
    """A cell as the slt runner prints it."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        s = ("%.12f" % v).rstrip("0").rstrip(".")
        return "0" if s in ("-0", "") else s
    if v == "":
        return "(empty)"
    return str(v)


def basalt_cell(s):
    if s == "NULL":
        return "NULL"
    try:
        return str(int(s))
    except ValueError:
        pass
    try:
        return norm(float(s))
    except ValueError:
        return "(empty)" if s == "" else s


def run_basalt(binary, db, queries):
    """Each query's rows as normalised cells, or None when Basalt failed on it."""
    import csv
    import io
    script = [".nullvalue NULL", ".mode csv"]
    for i, q in enumerate(queries):
        script.append(f"SELECT 'MARK{i}' AS m;")
        script.append(q + ";")
    script.append(f"SELECT 'MARK{len(queries)}' AS m;")
    out = subprocess.run([binary, db], input="\n".join(script) + "\n", capture_output=True,
                         text=True).stdout
    lines = out.split("\n")
    res = [None] * len(queries)
    i, cur = None, []
    for line in lines:
        if line.startswith("MARK"):
            if i is not None and i < len(queries):
                res[i] = cur
            i, cur = int(line[4:]), []
        elif line == "m":
            continue
        else:
            cur.append(line)
    parsed = []
    for r in res:
        if not r:  # no header: the statement failed
            parsed.append(None)
            continue
        rows = list(csv.reader(io.StringIO("\n".join(r[1:]))))
        parsed.append([[basalt_cell(c) for c in row] for row in rows if row])
    return parsed


def main():
    binary, out_dir = sys.argv[1], sys.argv[2]
    per_family = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    rng = random.Random(SEED)
    t1, t2 = setup_rows(rng)
    setup = setup_sql(t1, t2)
    lite = sqlite3.connect(":memory:")
    for s in setup:
        lite.execute(s)
    tmp = tempfile.mkdtemp()
    db = os.path.join(tmp, "db")
    subprocess.run([binary, db], input=";\n".join(setup) + ";\n", check=True,
                   capture_output=True, text=True)
    os.makedirs(out_dir, exist_ok=True)
    mismatches = []
    total = 0
    for fam in FAMILIES:
        g = Gen(random.Random(f"{SEED}-{fam}"))
        queries, expected = [], []
        seen = set()
        attempts = 0
        # A family with fewer distinct shapes than asked for stops at what it has.
        while len(queries) < per_family and attempts < per_family * 20:
            attempts += 1
            q = getattr(g, fam)()
            if q in seen:
                continue
            seen.add(q)
            try:
                rows = lite.execute(q).fetchall()
            except sqlite3.Error:
                continue
            queries.append(q)
            expected.append([[norm(v) for v in row] for row in rows])
        got = run_basalt(binary, db, queries)
        records = []
        for q, want, have in zip(queries, expected, got):
            ordered = " ORDER BY " in q and "LIMIT" in q
            key = (lambda rows: rows) if ordered else sorted
            if have is not None and key(have) == key(want):
                ncol = len(want[0]) if want else (len(have[0]) if have else 1)
                types = "".join("I" if all(c == "NULL" or c.lstrip("-").isdigit()
                                            for c in (row[j] for row in want)) else "T"
                                for j in range(ncol)) or "I"
                sort = "" if ordered else " rowsort"
                body = "\n".join(" ".join(row) for row in key(want))
                records.append(f"query {types}{sort}\n{q}\n----\n{body}\n".replace("\n\n", "\n"))
            else:
                mismatches.append(f"[{fam}] {q}\n  sqlite: {want}\n  basalt: "
                                  f"{'error' if have is None else have}\n")
        total += len(records)
        with open(os.path.join(out_dir, f"sqlite_{fam}.slt"), "w") as f:
            f.write(f"# Generated by generate_sqlite_conformance.py (seed {SEED}): random "
                    f"{fam.replace('_', ' ')} queries,\n# expected results from SQLite "
                    f"{sqlite3.sqlite_version}. Regenerate instead of editing.\n\n")
            for s in setup:
                f.write(f"statement ok\n{s}\n\n")
            f.write("\n".join(records))
        print(f"{fam}: {len(records)} of {len(queries)} agree")
    listing = os.path.join(tempfile.gettempdir(), "sqlite-mismatches.txt")
    with open(listing, "w") as f:
        f.writelines(mismatches)
    print(f"{total} records written; {len(mismatches)} disagreements listed in {listing}")


if __name__ == "__main__":
    main()
