"""Parses an exposition from stdin with Python's prometheus_client (the parser
Prometheus-ecosystem tooling trusts) and prints one `name{labels} value` line
per sample, labels sorted, so a Rust test can compare them.

Usage: parse_exposition.py text|openmetrics < exposition
Exits non-zero (with the parser's error) when the input does not parse.
"""

import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text


def main() -> int:
    fmt = sys.argv[1]
    text = sys.stdin.read()
    parse = parse_openmetrics if fmt == "openmetrics" else parse_text
    families = 0
    for family in parse(text):
        families += 1
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            print(f"{family.type} {sample.name}{{{labels}}} {sample.value!r}")
    print(f"families {families}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
