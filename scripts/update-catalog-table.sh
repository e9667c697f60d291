#!/usr/bin/env bash
# Rewrites docs/CATALOG.md's metric table from the catalog: the output of
# `cargo run --example catalog_table`, between the table's markers
# (tests/readme.rs fails until the two agree).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --locked --example catalog_table
table=$(cargo run --quiet --locked --example catalog_table)
families=$(cargo run --quiet --locked --example catalog_table -- bucket-families)
python3 - "$table" "$families" <<'PY'
import sys
for path, marker, table in [
    ("docs/CATALOG.md", "catalog", sys.argv[1]),
    ("docs/CLI.md", "bucket-families", sys.argv[2]),
]:
    text = open(path).read()
    begin = text.index(f"<!-- {marker}:begin")
    begin = text.index("\n", begin) + 1
    end = text.index(f"<!-- {marker}:end -->")
    open(path, "w").write(text[:begin] + table + "\n" + text[end:])
PY
