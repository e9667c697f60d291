#!/usr/bin/env python3
"""Compare two Prometheus text expositions.

Usage:
    python3 tests/reference/compare.py EXPECTED.prom ACTUAL.prom

Both files are parsed with a small strict parser (``# HELP``, ``# TYPE``,
other ``#`` comments such as OpenMetrics ``# EOF`` are ignored, samples
``name{labels} value [timestamp]``).  Only families / samples whose name starts
with ``vllm:`` (vLLM's families) or ``gen_ai_`` (the GenAI semantic-convention
histograms of ``--semconv gen_ai``, docs/SEMANTICS.md §3c) are compared;
everything else (e.g. the pipeline's own ``vllm_otel_metrics_*``
self-telemetry) is ignored.  Sample order does not matter.

Fails (exit 1, listing up to 50 differences) unless
  * the HELP and TYPE lines of the vllm: and gen_ai_ families are the same sets,
  * the sample keys (name + label set; label values compared as exact
    strings, so le="1.0" != le="1"; a label with an empty value is no
    label, as in Prometheus) are the same sets,
  * the values are equal as floats (rel. tolerance 1e-9, abs. 1e-12).
A parse error is a failure too (exit 1); a usage error exits 2.  On success prints "N samples compared, 0 differences".
"""

from __future__ import annotations

import math
import re
import sys

NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
PREFIXES = ("vllm:", "gen_ai_")
MAX_DIFFS = 50


class ParseError(Exception):
    pass


def parse_value(text: str, where: str) -> float:
    special = {"+Inf": math.inf, "Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
    if text in special:
        return special[text]
    try:
        return float(text)
    except ValueError:
        raise ParseError(f"{where}: bad sample value {text!r}") from None


def parse_labels(s: str, i: int, where: str) -> tuple[dict, int]:
    """Parse `{a="x",b="y"}` starting at s[i] == '{'; return (labels, next index)."""
    labels: dict[str, str] = {}
    i += 1
    while True:
        if i < len(s) and s[i] == "}":
            return labels, i + 1
        m = LABEL_NAME_RE.match(s, i)
        if not m:
            raise ParseError(f"{where}: bad label name at column {i + 1}")
        lname = m.group(0)
        i = m.end()
        if s[i:i + 2] != '="':
            raise ParseError(f"{where}: expected '=\"' after label {lname!r}")
        i += 2
        value = []
        while True:
            if i >= len(s):
                raise ParseError(f"{where}: unterminated label value")
            c = s[i]
            if c == "\\":
                nxt = s[i + 1:i + 2]
                if nxt == "n":
                    value.append("\n")
                elif nxt in ('"', "\\"):
                    value.append(nxt)
                else:
                    raise ParseError(f"{where}: bad escape \\{nxt} in label value")
                i += 2
            elif c == '"':
                i += 1
                break
            else:
                value.append(c)
                i += 1
        if lname in labels:
            raise ParseError(f"{where}: duplicate label {lname!r}")
        labels[lname] = "".join(value)
        if i < len(s) and s[i] == ",":
            i += 1
        elif i < len(s) and s[i] == "}":
            continue
        else:
            raise ParseError(f"{where}: expected ',' or '}}' after label {lname!r}")


def parse(path: str):
    """Return (meta, samples): meta = {("HELP"|"TYPE", family): text},
    samples = {(name, frozenset(labels)): value}."""
    meta: dict[tuple[str, str], str] = {}
    samples: dict[tuple, float] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            where = f"{path}:{lineno}"
            line = line.rstrip("\n")
            if line.strip() == "":
                continue
            if line.startswith("#"):
                parts = line.split(" ", 3)
                if len(parts) >= 3 and parts[0] == "#" and parts[1] in ("HELP", "TYPE"):
                    kind, fam = parts[1], parts[2]
                    text = parts[3] if len(parts) > 3 else ""
                    if not NAME_RE.fullmatch(fam):
                        raise ParseError(f"{where}: bad metric name {fam!r}")
                    if kind == "TYPE" and text not in (
                            "counter", "gauge", "histogram", "summary", "untyped",
                            "unknown", "info", "stateset", "gaugehistogram"):
                        raise ParseError(f"{where}: bad TYPE {text!r}")
                    if (kind, fam) in meta:
                        raise ParseError(f"{where}: duplicate {kind} for {fam}")
                    meta[(kind, fam)] = text
                continue              # other comments (e.g. "# EOF") are ignored
            m = NAME_RE.match(line)
            if not m:
                raise ParseError(f"{where}: bad sample line {line!r}")
            name = m.group(0)
            i = m.end()
            labels: dict[str, str] = {}
            if i < len(line) and line[i] == "{":
                labels, i = parse_labels(line, i, where)
            if i >= len(line) or line[i] != " ":
                raise ParseError(f"{where}: expected a space before the value")
            fields = line[i + 1:].split(" ")
            if len(fields) not in (1, 2) or fields[0] == "":
                raise ParseError(f"{where}: bad value/timestamp part {line[i + 1:]!r}")
            value = parse_value(fields[0], where)
            # An empty label value is no label (Prometheus' data model).
            key = (name, frozenset((k, v) for k, v in labels.items() if v != ""))
            if key in samples:
                raise ParseError(f"{where}: duplicate sample {fmt_key(key)}")
            samples[key] = value
    return meta, samples


def fmt_key(key) -> str:
    name, labels = key
    order = {"model_name": 0, "engine": 1, "le": 3}
    inner = ",".join(f'{k}="{v}"' for k, v in
                     sorted(labels, key=lambda kv: (order.get(kv[0], 2), kv[0])))
    return f"{name}{{{inner}}}"


def keep(name: str) -> bool:
    return name.startswith(PREFIXES)


def equal(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def compare(expected_path: str, actual_path: str) -> tuple[int, list[str]]:
    e_meta, e_samples = parse(expected_path)
    a_meta, a_samples = parse(actual_path)
    e_meta = {k: v for k, v in e_meta.items() if keep(k[1])}
    a_meta = {k: v for k, v in a_meta.items() if keep(k[1])}
    e_samples = {k: v for k, v in e_samples.items() if keep(k[0])}
    a_samples = {k: v for k, v in a_samples.items() if keep(k[0])}

    diffs: list[str] = []
    for k in sorted(set(e_meta) | set(a_meta)):
        kind, fam = k
        if k not in a_meta:
            diffs.append(f"missing   # {kind} {fam} {e_meta[k]}")
        elif k not in e_meta:
            diffs.append(f"unexpected # {kind} {fam} {a_meta[k]}")
        elif e_meta[k] != a_meta[k]:
            diffs.append(f"different # {kind} {fam}: expected {e_meta[k]!r}, got {a_meta[k]!r}")
    compared = 0
    for k in sorted(set(e_samples) | set(a_samples), key=fmt_key):
        if k not in a_samples:
            diffs.append(f"missing    sample {fmt_key(k)} (expected {e_samples[k]!r})")
        elif k not in e_samples:
            diffs.append(f"unexpected sample {fmt_key(k)} = {a_samples[k]!r}")
        else:
            compared += 1
            if not equal(e_samples[k], a_samples[k]):
                diffs.append(f"value      {fmt_key(k)}: expected {e_samples[k]!r}, "
                             f"got {a_samples[k]!r}")
    return compared, diffs


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        compared, diffs = compare(argv[0], argv[1])
    except (ParseError, OSError, UnicodeDecodeError) as e:
        print(f"parse error: {e}")
        return 1
    if diffs:
        print(f"{len(diffs)} differences ({compared} common samples compared); "
              f"expected={argv[0]} actual={argv[1]}")
        for line in diffs[:MAX_DIFFS]:
            print("  " + line)
        if len(diffs) > MAX_DIFFS:
            print(f"  ... and {len(diffs) - MAX_DIFFS} more")
        return 1
    print(f"{compared} samples compared, 0 differences")
    return 0


if __name__ == "__main__":
    sys.exit(main())
