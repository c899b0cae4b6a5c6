#!/usr/bin/env bash
# Downloads DataFusion's sqllogictest corpus (the test_files/ of the datafusion-sqllogictest
# 55.2.0 crate, from crates.io) for engine/tests/it/df_corpus.rs. Not a cargo dependency on
# purpose: that crate would build a second, larger DataFusion.
# Usage: engine/tests/fetch-datafusion-slt.sh [DEST]   (prints the test_files directory)
set -euo pipefail
version=55.2.0
dest="${1:-${CARGO_TARGET_DIR:-$(dirname "$0")/../../target}/datafusion-slt}"
mkdir -p "$dest"
if [ ! -d "$dest/datafusion-sqllogictest-$version/test_files" ]; then
  curl -sSfL -o "$dest/crate.tar.gz" \
    "https://static.crates.io/crates/datafusion-sqllogictest/datafusion-sqllogictest-$version.crate"
  tar xzf "$dest/crate.tar.gz" -C "$dest"
  rm "$dest/crate.tar.gz"
fi
cd "$dest/datafusion-sqllogictest-$version/test_files" && pwd
