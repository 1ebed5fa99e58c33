#!/usr/bin/env bash
# mypy finds a package in a folder of its name. The folder streaming/ is the `liveviews`
# package and server/ its `liveviews.gateway` (setup.py's mapping, which mypy cannot read), so
# mypy reads a tree of links laid out as the package is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
tree=build/typecheck/liveviews
rm -rf build/typecheck
mkdir -p "$tree"
for entry in streaming/*; do
    [ "$(basename "$entry")" = __pycache__ ] || ln -s "$PWD/$entry" "$tree/"
done
ln -s "$PWD/server" "$tree/gateway"
MYPYPATH=build/typecheck .venv/bin/mypy "$tree" demo deploy bench "$@"
