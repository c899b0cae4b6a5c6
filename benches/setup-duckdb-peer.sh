#!/usr/bin/env bash
# Fetches the DuckDB peer of the cross-engine benchmark without compiling DuckDB: the
# prebuilt libduckdb.so 1.5.5 inside the npm package @duckdb/node-bindings-linux-x64@1.5.5-r.5
# and DuckDB's fts extension for the same version from the PyPI wheel
# duckdb-extension-fts==1.5.5 (both registries are reachable from CI machines).
#
# Usage: benches/setup-duckdb-peer.sh [DEST]
# Prints the variables to export before building/running the harness with `--features duckdb`
# (the duckdb crate links through DUCKDB_LIB_DIR; the binary loads it through LD_LIBRARY_PATH).
set -euo pipefail
npm_pkg="@duckdb/node-bindings-linux-x64@1.5.5-r.5"
fts_wheel="duckdb-extension-fts==1.5.5"
dest="${1:-${CARGO_TARGET_DIR:-$(cd "$(dirname "$0")/.." && pwd)/target}/duckdb-peer}"
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"
cd "$dest"

if [ ! -f lib/libduckdb.so ]; then
  rm -rf npm && mkdir npm
  (cd npm && npm pack --silent "$npm_pkg" >/dev/null)
  tar xzf npm/*.tgz -C npm
  mkdir -p lib
  cp npm/package/libduckdb.so lib/
  rm -rf npm
fi
if ! nm -D --defined-only lib/libduckdb.so | grep ' duckdb_open$' >/dev/null; then
  echo "lib/libduckdb.so does not export duckdb_open" >&2
  exit 1
fi

if [ ! -f ext/fts.duckdb_extension ]; then
  rm -rf wheel && mkdir wheel
  python3 -m pip download --quiet --no-deps "$fts_wheel" -d wheel
  mkdir -p ext
  python3 - "$dest" <<'PY'
import glob, sys, zipfile
dest = sys.argv[1]
whl = glob.glob(f"{dest}/wheel/*.whl")[0]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith("fts.duckdb_extension"))
    open(f"{dest}/ext/fts.duckdb_extension", "wb").write(z.read(name))
PY
  rm -rf wheel
fi

echo "export DUCKDB_LIB_DIR=$dest/lib"
echo "export LD_LIBRARY_PATH=$dest/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
echo "export BASALT_DUCKDB_FTS=$dest/ext/fts.duckdb_extension"
