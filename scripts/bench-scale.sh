#!/usr/bin/env bash
# Capacity of the scale-out tier on this machine: N producers, each with
# 1,000 label sets, push through an agent and a gateway Collector into a
# Prometheus remote-write receiver; prints, per N, offered and written series
# per second, the CPU of each part and series per gateway CPU-second.
#
#   bash scripts/bench-scale.sh                     # N = 1,2,3,4 every 5 s
#   bash scripts/bench-scale.sh --producers 1,2 --interval 10 --window 60
#   bash scripts/bench-scale.sh --store thanos      # into a Thanos Receive hashring
#
# Needs Prometheus (Debian's `prometheus`), Go (for the Collector and Thanos)
# and Python 3.
# docs/SCALING.md turns the figures into a sizing table.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bash otel-collector/build.sh
case " $* " in *" --store thanos "* | *" --store=thanos "*) bash otel-collector/build-thanos.sh ;; esac
exec python3 scripts/bench_scale.py "$@"
