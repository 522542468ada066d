#!/usr/bin/env python3
"""One client process of the nemesis suite (`nemesis.py`): holds keys of
one lock through the real Python client and logs what it believed.

    python3 nemesis_client.py --nodes A,B,C --id N --keys 4 --seconds S
        --seed X --ttl-ms T --wait-ms W --log FILE --state FILE [--never-looks]
        [--stop-file FILE]
    python3 nemesis_client.py --nodes A,B,C --final --keys 4 --wait-ms W --log FILE

Each hold is one JSON line in FILE, times in CLOCK_MONOTONIC nanoseconds
(shared by every process of the machine, so the checker can lay the lines
of all clients side by side): `called` (the hold asked), `start` (its body
began), `ok_until` (the last look at the lease, taken just before the look,
that answered "not lost"; null when none did), `end` (the body ended),
`returned`, the `fence`, and the `outcome` (`ok`, the error's kind, or
`undocumented` for an exception the client does not document). The
state file holds `1` and the key while a body runs (`0` otherwise), so
the nemesis can pause a client that holds, or end a key's node while its
key is held.

`--stop-file` ends it early: no hold is begun once FILE exists (the
nemesis's phases may outlast `--seconds`'s guess). `--never-looks` is the
mutant the checker must catch: it never looks at
the lease and believes it holds until its body ends. `--final` holds every
key once after the faults healed, trying again after a hold that failed
(`closed` from a node that is gone) until `--wait-ms` is spent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional

# The working tree's client (standard library only), whatever is installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "src"))
import holdline_client  # noqa: E402

LOCK = "nemesis"
STATE_WIDTH = 32


def now() -> int:
    return time.monotonic_ns()


class Holder:
    def __init__(self, args: argparse.Namespace, log: Any) -> None:
        self.args = args
        self.log = log
        self.rng = random.Random(args.seed)
        self.keys = [f"k{i}" for i in range(args.keys)]
        self.state = os.open(args.state, os.O_WRONLY | os.O_CREAT, 0o644) if args.state else -1

    def holding(self, key: Optional[str]) -> None:
        """Says in the state file whether a body runs, and on which key:
        `1KEY` or `0`, padded to a fixed width."""
        if self.state >= 0:
            said = b"1" + key.encode() if key is not None else b"0"
            os.pwrite(self.state, said.ljust(STATE_WIDTH), 0)

    def write(self, record: Dict[str, Any]) -> None:
        self.log.write(json.dumps(record) + "\n")
        self.log.flush()

    async def body(self, lease: holdline_client.Lease, record: Dict[str, Any]) -> None:
        """Works a few short steps, looking at the lease before each."""
        record["start"] = now()
        record["fence"] = lease.fence
        self.holding(record["key"])
        ok_until: Optional[int] = None
        # Mostly short work; now and then long (past the lease's ttl, which
        # the client renews meanwhile), where a node's slow clock would show.
        step = (0.2, 0.6) if self.rng.random() < 0.15 else (0.01, 0.08)
        for _ in range(self.rng.randint(1, 5)):
            if not self.args.never_looks:
                looked = now()
                if lease.lost:
                    break
                ok_until = looked
            await asyncio.sleep(self.rng.uniform(*step))
        record["end"] = now()
        self.holding(None)
        record["ok_until"] = record["end"] if self.args.never_looks else ok_until

    async def hold_once(self, lock: holdline_client.Lock, key: str, wait_ms: int) -> str:
        record: Dict[str, Any] = {"client": self.args.id, "key": key, "called": now()}
        try:
            async with lock.hold(key, wait=f"{wait_ms}ms") as lease:
                await self.body(lease, record)
            record["outcome"] = "ok"
        except holdline_client.Error as e:
            record["outcome"] = e.kind
            record["error"] = str(e)
        except Exception as e:  # noqa: BLE001 - the checker judges it
            record["outcome"] = "undocumented"
            record["error"] = repr(e)
        finally:
            self.holding(None)
        record["returned"] = now()
        self.write(record)
        return str(record["outcome"])

    async def hold_again(self, lock: holdline_client.Lock, key: str) -> None:
        """Holds `key` once, as a user would: a hold cut by a failover fails
        `closed` (the map is refreshed then) and the next one is tried,
        until one is granted or the wait is spent."""
        until = time.monotonic() + self.args.wait_ms / 1000
        while time.monotonic() < until:
            left = max(1, int((until - time.monotonic()) * 1000))
            if await self.hold_once(lock, key, left) == "ok":
                return
            await asyncio.sleep(0.05)

    def told_to_stop(self) -> bool:
        """Whether the nemesis asked it to end early (`--stop-file` exists)."""
        return bool(self.args.stop_file) and os.path.exists(self.args.stop_file)

    async def run(self) -> None:
        args = self.args
        async with holdline_client.connect(args.nodes, connect_timeout="2s") as store:
            lock = store.lock(LOCK, ttl=f"{args.ttl_ms}ms")
            if args.final:
                for key in self.keys:
                    await self.hold_again(lock, key)
                return
            until = time.monotonic() + args.seconds
            while time.monotonic() < until and not self.told_to_stop():
                await self.hold_once(lock, self.rng.choice(self.keys), args.wait_ms)
                await asyncio.sleep(self.rng.uniform(0, 0.02))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", required=True)
    p.add_argument("--id", type=int, default=0)
    p.add_argument("--keys", type=int, default=4)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ttl-ms", type=int, default=2000)
    p.add_argument("--wait-ms", type=int, default=3000)
    p.add_argument("--log", required=True)
    p.add_argument("--state", default="")
    p.add_argument("--stop-file", default="")
    p.add_argument("--never-looks", action="store_true")
    p.add_argument("--final", action="store_true")
    args = p.parse_args()
    with open(args.log, "a") as log:
        asyncio.run(Holder(args, log).run())


if __name__ == "__main__":
    main()
