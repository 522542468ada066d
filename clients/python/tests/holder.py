"""A holder in a process of its own, for the tests that kill or stop one.

    python holder.py ADDRESS LOCK KEY [TTL] [look] [--permits N] [--take M|all]

Prints `held FENCE` once it holds the key, then waits for the lease's
signal: `signal TEXT` when it is set, then `exit TEXT` with what leaving
the block raised (or `exit ok`).

With `look`, a SIGCONT makes it print `look LOST ERROR`: the lease's
`lost` and `error` as they read the moment the process runs again. The
look is a Python signal handler, which runs as soon as the interpreter
gets control back (inside the event loop's interrupted wait), before any
timer or reply of the event loop: the first thing it does on waking.

`--permits N` opens the lock with N permits per key; `--take M` takes M
of them, `--take all` all (exclusive), as the Rust and Go holders do.
"""

import asyncio
import signal
import sys
from types import FrameType
from typing import Dict, List, Optional, Tuple

import holdline_client


async def main(
    address: str, lock: str, key: str, ttl: str, look: bool, flags: Dict[str, str]
) -> None:
    take = flags.get("--take", "1")
    permits = None if take == "all" else int(take)
    async with holdline_client.connect(address) as store:
        opened = store.lock(lock, ttl=ttl, permits=int(flags.get("--permits", "1")))
        try:
            async with opened.hold(
                key, wait="30s", permits=permits, exclusive=take == "all"
            ) as lease:
                assert lease is not None

                def on_wake(signum: int, frame: Optional[FrameType]) -> None:
                    print("look", lease.lost, lease.error, flush=True)

                if look:
                    signal.signal(signal.SIGCONT, on_wake)
                print("held", lease.fence, flush=True)
                await lease.signal.wait()
                print("signal", lease.error, flush=True)
        except holdline_client.Error as err:
            print("exit", err, flush=True)
        else:
            print("exit ok", flush=True)


def split_flags(argv: List[str]) -> Tuple[List[str], Dict[str, str]]:
    """The positional arguments, and the `--name value` pairs among them."""
    args: List[str] = []
    flags: Dict[str, str] = {}
    rest = iter(argv)
    for arg in rest:
        if arg.startswith("--"):
            flags[arg] = next(rest)
        else:
            args.append(arg)
    return args, flags


if __name__ == "__main__":
    args, flags = split_flags(sys.argv[1:])
    ttl = args[3] if len(args) > 3 else "10s"
    asyncio.run(main(args[0], args[1], args[2], ttl, args[4:] == ["look"], flags))
