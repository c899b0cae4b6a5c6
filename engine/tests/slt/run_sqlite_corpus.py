#!/usr/bin/env python3
"""Runs files of SQLite's own sqllogictest corpus through the `basalt` shell and reports
how many records pass, with the most common reasons for the failures.

Not part of the test suite: the corpus (SQLite's "sqllogictest", millions of records) is
not in this repository and CI has no network; fetch a copy (a mirror of
https://www.sqlite.org/sqllogictest, e.g. the `test/` folder of
github.com/gregrahn/sqllogictest) and point this script at its files:

    run_sqlite_corpus.py BASALT_BINARY FILE.test [FILE.test ...]

Records marked `skipif sqlite` are skipped and `onlyif <other engine>` ones too; `halt`
ends a file. Each file runs as one script in one in-memory database (`.mode list`); each
record is followed by a marker query so outputs and errors map back to records. Values
are compared as the corpus writes them: integers (booleans as 1 / 0), reals with three
decimals, NULL as `NULL`, empty text as `(empty)`, other non-printable characters as `@`;
`rowsort` / `valuesort` sort before comparing and "N values hashing to H" results are
compared by MD5 as the corpus defines it.
"""

import hashlib, re, subprocess, sys, collections

SEP = "|~|"  # column separator of the shell's list mode

def parse(path):
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    recs, i, cond_skip = [], 0, False
    while i < len(lines):
        l = lines[i].rstrip()
        if not l or l.startswith("#"):
            i += 1; continue
        w = l.split()
        if w[0] == "skipif":
            if w[1] == "sqlite": cond_skip = True
            i += 1; continue
        if w[0] == "onlyif":
            if w[1] != "sqlite": cond_skip = True
            i += 1; continue
        if w[0] == "halt":
            if not cond_skip: break
            cond_skip = False; i += 1; continue
        if w[0] == "hash-threshold":
            i += 1; continue
        if w[0] == "statement":
            i += 1; sql = []
            while i < len(lines) and lines[i].strip():
                sql.append(lines[i]); i += 1
            if not cond_skip: recs.append(("statement", w[1], "\n".join(sql), None, None, l))
            cond_skip = False; continue
        if w[0] == "query":
            types, sort = w[1], (w[2] if len(w) > 2 else "nosort")
            i += 1; sql = []
            while i < len(lines) and lines[i].strip() != "----" and lines[i].strip():
                sql.append(lines[i]); i += 1
            res = []
            if i < len(lines) and lines[i].strip() == "----":
                i += 1
                while i < len(lines) and lines[i].strip():
                    res.append(lines[i].strip()); i += 1
            if not cond_skip: recs.append(("query", types, "\n".join(sql), sort, res, l))
            cond_skip = False; continue
        i += 1
    return recs

def fmt(v, t):
    if v == "NULL": return "NULL"
    if t == "I":
        if v in ("true", "false"): return "1" if v == "true" else "0"
        try: return str(int(float(v))) if not re.fullmatch(r"-?\d+", v) else v
        except ValueError: return "0"
    if t == "R":
        try: return "%.3f" % float(v)
        except ValueError: return "0.000"
    if v == "": return "(empty)"
    return "".join(c if 32 <= ord(c) < 127 else "@" for c in v)

def run(basalt, path):
    recs = parse(path)
    script = [".mode list", ".headers off", ".nullvalue NULL", ".separator |~|"]
    for k, r in enumerate(recs):
        sql = r[2].strip().rstrip(";")
        script.append(sql + ";")
        script.append("SELECT '@@M%d@@';" % k)
    p = subprocess.run([basalt], input="\n".join(script) + "\n", capture_output=True, text=True, errors="replace")
    out = p.stdout.split("\n")
    errs = collections.defaultdict(list)
    for l in p.stderr.split("\n"):
        m = re.search(r"\(statement (\d+)\)", l)
        if m: errs[int(m.group(1))].append(l)
    # outputs per record: lines before marker k
    chunks, cur = {}, []
    for l in out:
        m = re.fullmatch(r"@@M(\d+)@@", l)
        if m: chunks[int(m.group(1))] = cur; cur = []
        else: cur.append(l)
    fails = []
    for k, r in enumerate(recs):
        stmt_no = 2 * k + 1
        err = errs.get(stmt_no)
        kind = r[0]
        if kind == "statement":
            want_ok = r[1] == "ok"
            if want_ok and err: fails.append((r, "error: " + err[0][:300]))
            elif not want_ok and not err: fails.append((r, "expected error"))
            continue
        if err: fails.append((r, "error: " + err[0][:300])); continue
        types, sort, want = r[1], r[3], r[4]
        rows = [l.split(SEP) for l in chunks.get(k, []) if l != "" or len(types) == 1]
        rows = [row for row in rows if not (len(row) == 1 and row[0].startswith("(") and "row" in row[0])]
        vals_rows = [[fmt(v, types[j] if j < len(types) else "T") for j, v in enumerate(row)] for row in rows]
        if sort == "rowsort": vals_rows.sort()
        vals = [v for row in vals_rows for v in row]
        if sort == "valuesort": vals.sort()
        if len(want) == 1 and "values hashing to" in want[0]:
            n, h = re.match(r"(\d+) values hashing to (\w+)", want[0]).groups()
            got = hashlib.md5(("\n".join(vals) + "\n").encode()).hexdigest() if vals else hashlib.md5(b"").hexdigest()
            if int(n) != len(vals) or got != h: fails.append((r, "hash mismatch: %d values vs %s" % (len(vals), n)))
        else:
            if vals != want: fails.append((r, "got %s want %s" % (vals[:8], want[:8])))
    return len(recs), fails

def main():
    if len(sys.argv) < 3:
        sys.exit("usage: run_sqlite_corpus.py BASALT_BINARY FILE.test [FILE.test ...]")
    tot = totf = 0
    for path in sys.argv[2:]:
        n, fails = run(sys.argv[1], path)
        tot += n
        totf += len(fails)
        print("%s: %d/%d pass" % (path.split("/")[-1], n - len(fails), n))
        reasons = collections.Counter(re.sub(r"\d+", "N", f[1])[:140] for f in fails)
        for reason, c in reasons.most_common(6):
            print("   %5d  %s" % (c, reason))
        for r, why in fails[:2]:
            print("      e.g. %s | %s" % (r[2].replace("\n", " ")[:200], why[:200]))
    print("TOTAL %d/%d" % (tot - totf, tot))


if __name__ == "__main__":
    main()
