"""A holder in a process of its own, for the tests that kill or stop one.

    python holder.py ADDRESS LOCK KEY [TTL]

Prints `held FENCE` once it holds the key, then waits for the lease's
signal: `signal TEXT` when it is set, then `exit TEXT` with what leaving
the block raised (or `exit ok`).
"""

import asyncio
import sys

import holdline


async def main(address: str, lock: str, key: str, ttl: str) -> None:
    store = await holdline.connect(address)
    try:
        async with store.lock(lock, ttl=ttl).hold(key, wait="30s") as lease:
            print("held", lease.fence, flush=True)
            await lease.signal.wait()
            print("signal", lease.error, flush=True)
    except holdline.Error as err:
        print("exit", err, flush=True)
    else:
        print("exit ok", flush=True)
    await store.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(args[0], args[1], args[2], args[3] if len(args) > 3 else "10s"))
