"""Expected ingest messages that several tests build."""

from vllm_otel_metrics.v1 import ingest_pb2 as pb


def nixl_stats(**given: object) -> pb.NixlStats:
    """A NIXL message as the plugin writes it: every list present (empty),
    every count zero, with ``given`` laid over them."""
    fields: dict[str, object] = {
        "transfer_duration": pb.Observations(),
        "post_duration": pb.Observations(),
        "bytes_transferred": pb.Observations(),
        "num_descriptors": pb.Observations(),
        "num_failed_transfers": 0,
        "num_failed_handshakes": 0,
        "num_failed_notifications": 0,
        "num_kv_expired_reqs": 0,
        "num_notifications_after_expiry": 0,
    }
    fields.update(given)
    return pb.NixlStats(**fields)  # type: ignore[arg-type]
