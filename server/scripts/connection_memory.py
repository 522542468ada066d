#!/usr/bin/env python3
"""Resident memory per connection, holdline serve against redis-server.

    python3 server/scripts/connection_memory.py [N] [HOLDLINE_BIN]

Starts each server on a free loopback port, opens N connections (default
10,000) that each take a key of their own (holdline: TRYHOLD; Redis: SET
NX PX, Redis's usual lock), reads the server's RSS, closes them all, waits
8 s and reads it again. Standard library only; raises its own descriptor
limit (needs a hard limit above N + 100).
"""

import os
import resource
import socket
import subprocess
import sys
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOLDLINE = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "target/release/holdline")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def command(*args: bytes) -> bytes:
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def measure(name: str, argv: list, port: int, take) -> None:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    time.sleep(0.5)
    start = rss_kib(proc.pid)
    socks = []
    for i in range(N):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(take(str(i).encode()))
        socks.append(s)
    for s in socks:
        s.recv(100)
    time.sleep(0.5)
    held = rss_kib(proc.pid)
    for s in socks:
        s.close()
    time.sleep(8)
    after = rss_kib(proc.pid)
    proc.terminate()
    proc.wait(10)
    each = (held - start) / N
    print(f"{name:9} start {start / 1024:6.1f} MiB, {N} connections each holding a key: "
          f"{held / 1024:6.1f} MiB ({each:.2f} KiB each), 8 s after they left: {after / 1024:6.1f} MiB")


def main() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (N + 200, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    port = free_port()
    measure("holdline", [HOLDLINE, "serve", "--listen", f"127.0.0.1:{port}",
                         "--max-connections", str(N + 100)], port,
            lambda k: command(b"TRYHOLD", b"mem", k))
    port = free_port()
    measure("redis", ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
                      "--maxclients", str(N + 100)], port,
            lambda k: command(b"SET", k, b"token", b"NX", b"PX", b"30000"))


if __name__ == "__main__":
    main()
