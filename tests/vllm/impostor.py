"""Another user on a shared host, for the plugin's impostor test
(``tests/plugin_shared_host.rs``): run by the system's python as that user, it
lays the traps the plugin must not fall into, then records what reaches it.

- ``--private-dir PATH``: makes the directory the plugin would use as its
  private directory (open to all, as a lure);
- ``--link PATH --to TARGET``: makes TARGET (open to all) and a symbolic
  link to it where the plugin's private directory would be;
- ``--port PORT``: listens on the plugin's ingest port, as a sidecar would;
- ``--lock PATH``: holds a ``flock`` on the plugin's old lock file.

Prints ``ready`` once all are in place, then ``got N HEX`` for every chunk
of bytes a connection sends (and ``connection`` for each connection), until
it is killed. Only the standard library: it runs outside vLLM's
environment, which another user cannot read.

    python3 impostor.py --port 50051 --private-dir /tmp/x/vllm-otel-metrics-0
"""

import argparse
import fcntl
import os
import socket
import sys
import threading


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--private-dir")
    p.add_argument("--link")
    p.add_argument("--to")
    p.add_argument("--port", type=int)
    p.add_argument("--lock")
    args = p.parse_args()
    os.umask(0)
    if args.private_dir:
        os.mkdir(args.private_dir, 0o777)
    if args.link:
        os.mkdir(args.to, 0o777)
        os.symlink(args.to, args.link)
    held = None
    if args.lock:
        held = open(args.lock, "a+b")  # noqa: SIM115 — held until killed
        fcntl.flock(held, fcntl.LOCK_EX)
    listener = None
    if args.port:
        listener = socket.socket()
        listener.bind(("127.0.0.1", args.port))
        listener.listen()
    say("ready")
    if listener is None:
        threading.Event().wait()
    while True:
        connection, _ = listener.accept()
        say("connection")
        threading.Thread(target=record, args=(connection,), daemon=True).start()


def record(connection):
    with connection:
        while True:
            try:
                data = connection.recv(65536)
            except OSError:
                return
            if not data:
                return
            say(f"got {len(data)} {data.hex()}")


_lock = threading.Lock()


def say(line):
    with _lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
