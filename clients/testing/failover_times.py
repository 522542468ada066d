#!/usr/bin/env python3
"""How long a cluster's keys go ungranted when their owner dies, and how
many leases a rolling restart ends.

    python3 failover_times.py [--trials 20] [--binary PATH] [--etcd-ttl 2] [--max-ttl 2s]
    python3 failover_times.py --rolling 3 [--holders 8]

On a cluster of three nodes (clients/testing/cluster.py), each trial picks
a node, a key it owns, and ends the node: `kill -9` (SIGKILL) or SIGTERM.
From that instant the other nodes are asked to HOLD the key (following
MOVED, asking again after CLUSTERDOWN or INUSE) until one grants it; the
time to that grant is the trial's. Then the node is started again and the
map left to settle. Prints p50 and max of each kind, in milliseconds, and
one JSON line with every trial.

After `kill -9` nothing may grant sooner than etcd ttl + max ttl after the
node's last keepalive; after SIGTERM the node hands its partitions over
and, since none of their keys is held, the next owner grants at once:
every moment past those is waste.

`--rolling N` makes N rolling restarts instead: each node in turn gets
SIGTERM and is started again, while `--holders` connections hold keys it
owns (TTL 30 s, longer than a restart; the cluster's max ttl is then a
minute). It counts the holds that did not
survive (their connection closed, or RENEW answered other than OK once
the cluster settled) and, for a fresh key of the node, the longest time
from the signal to a grant elsewhere.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster import Cluster, Push, RespError, _kill, command, read_frame  # noqa: E402

LOCK = "failover"


def grant_elsewhere(c: Cluster, dead: int, key: str, limit: float) -> Optional[float]:
    """Asks the live nodes for `key` until one grants it: the monotonic
    time of the grant's answer, or None past `limit`."""
    live = [n.addr for n in c.nodes if n.index != dead and n.alive()]
    addr = live[0]
    while time.monotonic() < limit:
        try:
            reply: object = command(addr, "HOLD", LOCK, key, "WAIT", 100, "TTL", 2000, timeout=2)
        except (OSError, RespError) as e:
            reply = e
        if isinstance(reply, list):
            return time.monotonic()  # its connection closed: the key let go
        text = str(reply)
        if text.startswith("MOVED"):
            addr = text.split()[2]
            continue
        if addr not in live:
            addr = live[0]
        time.sleep(0.005)
    return None


def trial(c: Cluster, i: int, sig: int) -> float:
    node = c.nodes[i]
    key = c.key_on(i, prefix=f"t{time.monotonic_ns()}-")
    started = time.monotonic()
    if sig == signal.SIGKILL:
        _kill(node.proc)
    else:
        assert node.proc is not None
        os.kill(node.proc.pid, sig)
        node.proc.wait(timeout=30)
    granted = grant_elsewhere(c, i, key, started + 60)
    if granted is None:
        raise TimeoutError(f"key {key} of node {i} not granted within 60 s")
    c.start(i)
    return (granted - started) * 1000


class Holder:
    """A connection holding one key across the restart of its node; with
    a secret (the default), it follows its lease when the node hands it
    over: told `moved` (a push, or MOVED to its RENEW), it re-attaches at
    the address given."""

    def __init__(self, addr: str, key: str, follow: bool) -> None:
        self.key = key
        self.secret = secrets.token_hex(16) if follow else None
        self.connect(addr)
        extra = ["SECRET", self.secret] if self.secret else []
        reply = self.send("HOLD", LOCK, key, "WAIT", 5000, "TTL", 30000, *extra)
        if not isinstance(reply, list):
            raise RuntimeError(f"HOLD {key}: {reply!r}")
        self.lease = int(reply[0])
        self.fence = int(reply[1])
        self.unanswered = 0.0

    def connect(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
        self.file = self.sock.makefile("rb")
        if self.secret:
            self.send("HELLO", 3)

    def send(self, *args: object) -> object:
        """The answer to one command; pushes before it are noted."""
        parts = [str(a).encode() for a in args]
        frame = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
        self.sock.sendall(frame)
        while True:
            reply = read_frame(self.file)
            if not isinstance(reply, Push):
                return reply
            self.note_push(reply)

    def note_push(self, push: Push) -> None:
        if push and push[0] == b"moved" and push[1] == self.lease:
            self.moved_to: Optional[str] = push[3].decode()

    def await_move(self, started: float) -> bool:
        """After its node's SIGTERM: reads until told where the lease went,
        then re-attaches there; whether it did (the time it went
        unanswered is kept)."""
        self.moved_to = None
        try:
            while self.moved_to is None:
                frame = read_frame(self.file)
                if isinstance(frame, Push):
                    self.note_push(frame)
        except (OSError, ConnectionError) as e:
            print(f"{self.key}: no word of where the lease went ({e!r})", file=sys.stderr)
            return False
        return self.reattach(self.moved_to, started)

    def reattach(self, named: str, started: float) -> bool:
        """REATTACH at `named`, following MOVED; a MOVED that names a node
        gone (the new owner's map lags the hand-over a moment) sends it
        back to `named` after a pause."""
        self.sock.close()
        addr = named
        for _ in range(200):
            try:
                self.connect(addr)
                reply = self.send("REATTACH", LOCK, self.key, self.secret)
            except (OSError, ConnectionError):
                addr = named
                time.sleep(0.05)
                continue
            if isinstance(reply, list):
                if int(reply[1]) != self.fence:
                    raise AssertionError(f"{self.key}: fence {reply[1]} after {self.fence}")
                self.lease = int(reply[0])
                self.unanswered = max(self.unanswered, (time.monotonic() - started) * 1000)
                return True
            text = str(reply)
            self.sock.close()
            if text.startswith("MOVED "):
                addr = text.split(" ")[2]
            elif text.startswith("CLUSTERDOWN"):
                time.sleep(0.02)
            else:
                print(f"{self.key}: REATTACH answered {text}", file=sys.stderr)
                return False
        return False

    def kept(self) -> bool:
        """Whether the lease is still this holder's: RENEW answers OK
        (following it once more if a node that came back took it)."""
        try:
            for _ in range(3):
                reply = self.send("RENEW", self.lease)
                if reply == "OK":
                    return True
                text = str(reply)
                if not (self.secret and text.startswith("MOVED ")):
                    print(f"{self.key}: RENEW answered {text}", file=sys.stderr)
                    return False
                if not self.reattach(text.split(" ")[2], time.monotonic()):
                    return False
            return False
        except (OSError, ConnectionError):
            return False
        finally:
            self.sock.close()


def rolling_restart(c: Cluster, holders: int, follow: bool) -> Tuple[int, int, float, float]:
    """One rolling restart: holds made, holds lost, the longest time from
    a node's SIGTERM to a grant of one of its keys elsewhere (ms), and the
    longest a hold went unanswered (ms: from SIGTERM to its re-attach)."""
    made = lost = 0
    longest = unanswered = 0.0
    for i, node in enumerate(c.nodes):
        held = [
            Holder(node.addr, c.key_on(i, prefix=f"r{time.monotonic_ns()}-{h}-"), follow)
            for h in range(holders)
        ]
        fresh = c.key_on(i, prefix=f"f{time.monotonic_ns()}-")
        started = time.monotonic()
        assert node.proc is not None
        os.kill(node.proc.pid, signal.SIGTERM)
        followed = [h.await_move(started) if follow else False for h in held]
        granted = grant_elsewhere(c, i, fresh, started + 60)
        if granted is None:
            raise TimeoutError(f"key {fresh} of node {i} not granted within 60 s")
        longest = max(longest, (granted - started) * 1000)
        node.proc.wait(timeout=60)
        c.start(i)
        made += len(held)
        lost += sum(not (f or not follow) or not h.kept() for f, h in zip(followed, held))
        unanswered = max([unanswered] + [h.unanswered for h in held])
    return made, lost, longest, unanswered


def report(name: str, ms: List[float]) -> str:
    return (
        f"{name}: p50 {statistics.median(ms):.0f} ms, max {max(ms):.0f} ms, "
        f"min {min(ms):.0f} ms over {len(ms)} trials"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--binary", default=None)
    p.add_argument("--etcd-ttl", type=float, default=2)
    p.add_argument("--max-ttl", default="2s")
    p.add_argument("--rolling", type=int, default=0, help="rolling restarts to make instead")
    p.add_argument("--holders", type=int, default=8, help="holds on each node (--rolling)")
    p.add_argument(
        "--no-follow",
        action="store_true",
        help="holders without a secret, as before hand-overs carried leases (--rolling)",
    )
    args = p.parse_args()
    if args.rolling:
        # The holds' 30 s ttl must be allowed: a max ttl of a minute.
        with Cluster(3, 8, args.etcd_ttl, args.binary, max_ttl="60s") as c:
            follow = not args.no_follow
            runs = [rolling_restart(c, args.holders, follow) for _ in range(args.rolling)]
        for n, (made, lost, longest, unanswered) in enumerate(runs):
            print(
                f"rolling restart {n + 1}: {lost} of {made} holds lost, "
                f"longest from SIGTERM to a grant elsewhere {longest:.0f} ms, "
                f"longest a hold went unanswered {unanswered:.0f} ms"
            )
        print(json.dumps({"rolling": [list(r) for r in runs]}))
        return 0
    times: Dict[str, List[float]] = {"kill -9": [], "SIGTERM": []}
    with Cluster(3, 8, args.etcd_ttl, args.binary, max_ttl=args.max_ttl) as c:
        for n in range(args.trials):
            times["kill -9"].append(trial(c, n % 3, signal.SIGKILL))
            times["SIGTERM"].append(trial(c, n % 3, signal.SIGTERM))
    for name, ms in times.items():
        print(report(name, ms))
    print(json.dumps({k: [round(v) for v in ms] for k, ms in times.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
