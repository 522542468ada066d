#!/usr/bin/env python3
"""The Python client's campaigner for `election.py` (see CAMPAIGNER.md).

    python3 election_campaigner.py --addr HOST:PORT --lock LOCK --name ELECTION
        --note NOTE --ttl-ms T [--ignores-loss]
    python3 election_campaigner.py --addr HOST:PORT --lock LOCK --name ELECTION --observe

Campaigns forever through the working tree's client (standard library
only): `elected` once it leads, `leading` every 20 ms while a look at the
leadership (taken just after the time `t`) finds it not lost, `lost` at the
first look that finds it lost, then campaigns again; a campaign's error is
printed as `error` and tried again 100 ms later. `--observe` prints each
item of `election.observe()` as `observed`. One JSON line each, times in
CLOCK_MONOTONIC nanoseconds.

`--ignores-loss` is the checker's mutant: once elected it never looks at
its leadership and prints `leading` every 20 ms until it is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

# The working tree's client (standard library only), whatever is installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "src"))
import holdline_client  # noqa: E402

BEAT_S = 0.02
RETRY_S = 0.1


def say(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": time.monotonic_ns(), **fields}) + "\n")
    sys.stdout.flush()


async def campaign(election: holdline_client.Election, note: str, ignores_loss: bool) -> None:
    while True:
        try:
            async with election.campaign(note) as lead:
                fence = lead.fence
                say("elected", fence=fence)
                while True:
                    await asyncio.sleep(BEAT_S)
                    t = time.monotonic_ns()
                    if not ignores_loss and lead.lost:
                        say("lost", fence=fence)
                        break
                    sys.stdout.write(
                        json.dumps({"event": "leading", "t": t, "fence": fence}) + "\n"
                    )
                    sys.stdout.flush()
        except holdline_client.Lost:
            continue  # leaving the block after the loss: printed already
        except holdline_client.Error as err:
            say("error", kind=err.kind, text=str(err))
            await asyncio.sleep(RETRY_S)


async def observe(election: holdline_client.Election) -> None:
    while True:
        try:
            async for leader in election.observe():
                if leader is None:
                    say("observed", fence=None, note=None)
                else:
                    say("observed", fence=leader.fence, note=leader.note)
        except holdline_client.Error as err:
            say("error", kind=err.kind, text=str(err))
            await asyncio.sleep(RETRY_S)


async def run(args: argparse.Namespace) -> None:
    async with holdline_client.connect(args.addr, connect_timeout="2s") as store:
        say("ready", pid=os.getpid())
        lock = store.lock(args.lock, ttl=f"{args.ttl_ms}ms")
        election = lock.election(args.name)
        if args.observe:
            await observe(election)
        else:
            await campaign(election, args.note, args.ignores_loss)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--addr", required=True)
    p.add_argument("--lock", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--note", default="")
    p.add_argument("--ttl-ms", type=int, default=2000)
    p.add_argument("--observe", action="store_true")
    p.add_argument("--ignores-loss", action="store_true")
    args = p.parse_args()
    if not args.observe and not args.note:
        p.error("--note is needed to campaign")
    try:
        asyncio.run(run(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
