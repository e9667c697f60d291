#!/usr/bin/env bash
# Runs the scale-out tier on this machine, in the foreground, until Ctrl-C:
#
#   simulate (the demo engines) --OTLP--> agent (otel-collector/agent.yaml,
#   :4317) --load-balanced--> gateways a and b (otel-collector/gateway.yaml,
#   :4327 and :4337) --remote write--> Prometheus (:9090,
#   --web.enable-remote-write-receiver)
#
#   bash scripts/run-tier.sh            # then open http://127.0.0.1:9090 and query
#                                       # sum by (instance) (vllm:request_num_preemptions_count)
#   PRODUCERS=0 bash scripts/run-tier.sh  # no simulator: push your own to 127.0.0.1:4317
#   bash scripts/run-tier.sh thanos     # the store is a Thanos Receive hashring instead
#
# `thanos` mode: the gateways write to a routing `thanos receive` (:19290),
# which writes every series to three ingesters (replication factor 3, write
# quorum 2, each labelling what it stores receive_replica="r0"/"r1"/"r2");
# `thanos query` on http://127.0.0.1:9090 (the same address) reads the three
# and deduplicates on receive_replica. Kill one ingester (its pid is printed)
# and nothing is lost. Every series also gains tenant_id="default-tenant".
#
# Needs Prometheus (Debian's `prometheus`) and Go (for the Collector and
# Thanos). Every port stays on 127.0.0.1; logs and data go to a temporary
# directory, printed.
set -euo pipefail
cd "$(dirname "$0")/.."
producers=${PRODUCERS:-2}
store=${1:-prometheus}
case "$store" in
  prometheus)
    command -v prometheus >/dev/null || { echo "run-tier: install Prometheus: apt-get install -y prometheus" >&2; exit 1; } ;;
  thanos) ;;
  *) echo "run-tier: unknown store '$store' (prometheus or thanos)" >&2; exit 2 ;;
esac
cargo build --release --quiet
bash otel-collector/build.sh >/dev/null
if [ "$store" = thanos ]; then bash otel-collector/build-thanos.sh >/dev/null; fi
work=$(mktemp -d -t vllm-tier-XXXXXX)
echo "run-tier: logs and data in $work"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; echo "run-tier: stopped"' EXIT INT TERM

if [ "$store" = prometheus ]; then
  printf 'global:\n  scrape_interval: 15s\n' >"$work/prometheus.yml"
  prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
    --web.listen-address=127.0.0.1:9090 --web.enable-remote-write-receiver >"$work/prometheus.log" 2>&1 &
  pids+=($!)
  remote_write=http://127.0.0.1:9090/api/v1/write
else
  thanos=otel-collector/bin/thanos
  endpoints=()
  for i in 0 1 2; do
    "$thanos" receive --tsdb.path="$work/tsdb-r$i" --tsdb.retention=1d --label="receive_replica=\"r$i\"" \
      --grpc-address=127.0.0.1:$((10901 + 10 * i)) --http-address=127.0.0.1:$((10902 + 10 * i)) \
      --remote-write.address=127.0.0.1:$((19291 + i)) --receive.capnproto-address=127.0.0.1:$((19391 + i)) \
      >"$work/ingester-r$i.log" 2>&1 &
    pids+=($!)
    echo "run-tier: ingester r$i, pid $!"
    endpoints+=("\"127.0.0.1:$((10901 + 10 * i))\"")
  done
  (IFS=,; echo "[{\"hashring\": \"default\", \"endpoints\": [${endpoints[*]}]}]") >"$work/hashring.json"
  "$thanos" receive --receive.hashrings-file="$work/hashring.json" --receive.replication-factor=3 \
    --label='receive="router"' --tsdb.path="$work/tsdb-router" \
    --grpc-address=127.0.0.1:10931 --http-address=127.0.0.1:10932 \
    --remote-write.address=127.0.0.1:19290 --receive.capnproto-address=127.0.0.1:19394 \
    >"$work/router.log" 2>&1 &
  pids+=($!)
  "$thanos" query --http-address=127.0.0.1:9090 --grpc-address=127.0.0.1:10941 \
    --query.replica-label=receive_replica \
    --endpoint=127.0.0.1:10901 --endpoint=127.0.0.1:10911 --endpoint=127.0.0.1:10921 \
    >"$work/query.log" 2>&1 &
  pids+=($!)
  remote_write=http://127.0.0.1:19290/api/v1/receive
fi

port=4327; health=13134; telemetry=8890
for name in a b; do
  GATEWAY_OTLP_GRPC_PORT=$port GATEWAY_HEALTH_PORT=$health GATEWAY_TELEMETRY_PORT=$telemetry \
    REMOTE_WRITE_URL=$remote_write \
    otel-collector/bin/otelcol-vllm --config otel-collector/gateway.yaml >"$work/gateway-$name.log" 2>&1 &
  pids+=($!)
  port=$((port + 10)); health=$((health + 1)); telemetry=$((telemetry + 1))
done

GATEWAYS='[127.0.0.1:4327,127.0.0.1:4337]' AGENT_HEALTH_PORT=13133 \
  otel-collector/bin/otelcol-vllm --config otel-collector/agent.yaml >"$work/agent.log" 2>&1 &
pids+=($!)
for port in 13133 13134 13135; do
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/" >/dev/null 2>&1 && break; sleep 0.2; done
done

for i in $(seq 1 "$producers"); do
  OTEL_RESOURCE_ATTRIBUTES="service.instance.id=demo-$i" target/release/vllm-otel-metrics simulate \
    --realtime --duration 86400 --seed "$i" --engines 2 --kv-blocks 512 --output none --metrics-addr none \
    --otlp-endpoint http://127.0.0.1:4317 --otlp-protocol grpc --otlp-interval-ms 5000 \
    >"$work/producer-$i.log" 2>&1 &
  pids+=($!)
done
echo "run-tier: $store http://127.0.0.1:9090, agent OTLP 127.0.0.1:4317 (gRPC) / 4318 (HTTP), $producers simulator(s); Ctrl-C stops"
wait
