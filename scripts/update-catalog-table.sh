#!/usr/bin/env bash
# Regenerates docs/CATALOG.md's metric table from src/catalog/.
set -euo pipefail
cd "$(dirname "$0")/.."
table=$(cargo test -q --test readme -- --ignored --nocapture print_catalog_table 2>/dev/null | grep '^|')
python3 - "$table" <<'PY'
import sys
path = "docs/CATALOG.md"
text = open(path).read()
begin = text.index("<!-- catalog:begin")
begin = text.index("\n", begin) + 1
end = text.index("<!-- catalog:end -->")
open(path, "w").write(text[:begin] + sys.argv[1] + "\n" + text[end:])
PY
