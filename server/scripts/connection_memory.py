#!/usr/bin/env python3
"""Resident memory per connection, holdline serve against redis-server.

    python3 server/scripts/connection_memory.py [N] [HOLDLINE_BIN]

Starts each server on a loopback port (holdline binds port 0 and says
which; redis-server gets one found free, and another when its log says
that one was taken meanwhile), opens N connections (default
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
import threading
import time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOLDLINE = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "target/release/holdline")


LISTENING = "holdline: listening on "


def port_to_try() -> int:
    """A port free now, for redis-server (its --port 0 means no TCP): it may
    be taken before redis binds it, so its start is retried then."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_holdline() -> tuple:
    """holdline serve on a port it binds itself: (process, port), the port
    read from its first line."""
    proc = subprocess.Popen([HOLDLINE, "serve", "--listen", "127.0.0.1:0",
                             "--max-connections", str(N + 100)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first = proc.stdout.readline()
    proc.stdout.close()  # nothing else comes there; it ignores a closed stdout
    if not first.startswith(LISTENING):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"holdline serve did not start: {first!r}")
    return proc, int(first.rsplit(":", 1)[1])


def start_redis() -> tuple:
    """redis-server (which cannot bind port 0 and say where) on a port found
    free, again on another while its log says the port was taken meanwhile:
    (process, port) once it logs that it is ready."""
    for _ in range(5):
        port = port_to_try()
        proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                 "--save", "", "--appendonly", "no", "--loglevel", "notice",
                                 "--maxclients", str(N + 100)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log = []
        for line in proc.stdout:  # its log (to stdout unless told a file)
            log.append(line)
            if "Ready to accept connections" in line:
                # Read the rest, so that a full pipe never stalls it.
                threading.Thread(target=proc.stdout.read, daemon=True).start()
                return proc, port
            if "Address already in use" in line:
                break
        proc.kill()
        proc.wait()
        if "Address already in use" not in "".join(log):
            raise RuntimeError("redis-server did not start:\n" + "".join(log[-10:]))
    raise RuntimeError("redis-server: every port tried was taken")


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


def measure(name: str, started: tuple, take) -> None:
    proc, port = started
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
    measure("holdline", start_holdline(), lambda k: command(b"TRYHOLD", b"mem", k))
    measure("redis", start_redis(), lambda k: command(b"SET", k, b"token", b"NX", b"PX", b"30000"))


if __name__ == "__main__":
    main()
