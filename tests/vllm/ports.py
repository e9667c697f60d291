"""Loopback ports for the servers the scripts here start."""

import random
import socket


def free_port() -> int:
    """A port that binds now, below the kernel's ephemeral range.

    A port the kernel hands out for port 0 can be handed out again, before
    the sidecar binds it, to any socket of the engines running beside it
    (ZMQ's, an outgoing connection's), and the sidecar then exits "address
    in use". Below the range only another explicit bind can take it.
    """
    low, _ = (int(n) for n in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    rng = random.Random()
    while True:
        port = rng.randrange(max(1024, low - 12_000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
