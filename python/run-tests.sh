#!/usr/bin/env bash
# The Python package's tests: makes a virtual environment (once), installs the build and test
# dependencies from PyPI into it, builds the extension in the dev profile with maturin (sharing
# the workspace's target directory) and runs pytest. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"

target="${CARGO_TARGET_DIR:-$(pwd)/../target}"
venv="${BASALT_VENV:-$target/python-venv}"
requirements="maturin>=1.5,<2 pytest numpy pyarrow>=15 pandas polars"

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
# Installed once per list of requirements.
stamp="$venv/.basalt-requirements"
if [ "$(cat "$stamp" 2>/dev/null)" != "$requirements" ]; then
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q --disable-pip-version-check $requirements
  echo "$requirements" > "$stamp"
fi

export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"
maturin develop -q
python -m pytest -q tests "$@"
