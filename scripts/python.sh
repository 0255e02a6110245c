#!/usr/bin/env bash
# The Python package (python/): builds it, installs it in a venv under
# .venv-py/ (git-ignored) with pytest and numpy, and runs its tests.
#
#   scripts/python.sh            build, install, run python/tests
#   scripts/python.sh --wheel D  build an abi3 wheel (CPython >= 3.9) into D,
#                                installable offline with
#                                pip install --no-deps --no-index D/gvault-*.whl
#
# The build reuses the workspace's target/ (release profile).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-py
py=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q "maturin>=1.5,<2"

if [ "${1:-}" = "--wheel" ]; then
  out=${2:?usage: scripts/python.sh --wheel DIR}
  mkdir -p "$out"
  "$venv/bin/maturin" build --release --strip --manifest-path python/Cargo.toml --out "$out"
  ls -l "$out"/gvault-*.whl
  exit 0
fi

"$venv/bin/python" -m pip install -q pytest numpy ml_dtypes
# What `pip install ./python` does, without copying the workspace: the
# wheel is built in place (target/ reused) and installed.
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
"$venv/bin/maturin" build --release --manifest-path python/Cargo.toml --out "$wheels" -q
"$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheels"/gvault-*.whl
cd python/tests
"../../$venv/bin/python" -m pytest -q "$@"
