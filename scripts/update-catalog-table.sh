#!/usr/bin/env bash
# Rewrites docs/CATALOG.md's metric table from the catalog: the output of
# `cargo run --example catalog_table`, between the table's markers
# (tests/readme.rs fails until the two agree).
set -euo pipefail
cd "$(dirname "$0")/.."
table=$(cargo run --quiet --locked --example catalog_table)
python3 - "$table" <<'PY'
import sys
path = "docs/CATALOG.md"
text = open(path).read()
begin = text.index("<!-- catalog:begin")
begin = text.index("\n", begin) + 1
end = text.index("<!-- catalog:end -->")
open(path, "w").write(text[:begin] + sys.argv[1] + "\n" + text[end:])
PY
