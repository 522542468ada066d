"""Python tasks and a Rust client (holdline-client) in one FIFO line.

The Rust holder is the example `client/examples/holder.rs`: `holder ADDRESS
LOCK KEY` prints `held FENCE`, holds until a line on stdin, prints
`released`. Found at $HOLDLINE_RUST_HOLDER, else
<repo>/target/release/examples/holder (`cargo build --release -p
holdline-client --example holder`); the test is skipped without it.
"""

import asyncio
import os
import subprocess
from pathlib import Path
from typing import List

import pytest
from conftest import REPO, Server, hold_in_background, until_waiters

import holdline


def rust_holder() -> Path:
    configured = os.environ.get("HOLDLINE_RUST_HOLDER")
    path = Path(configured) if configured else REPO / "target" / "release" / "examples" / "holder"
    if not path.is_file():
        pytest.skip(
            f"no Rust holder at {path} (cargo build --release -p holdline-client --example holder)"
        )
    return path


async def test_fifo_across_python_tasks_and_a_rust_client(
    server: Server, store: holdline.Store
) -> None:
    lock = store.lock("mixed")
    order: List[str] = []

    async def python_waiter(name: str) -> None:
        async with lock.hold("k", wait="60s") as lease:
            order.append(f"{name} {lease.fence}")

    first = await hold_in_background(lock, "k")
    order.append(f"python-1 {first.lease.fence}")
    # The line: python-2, then the Rust client, then python-3.
    second = asyncio.create_task(python_waiter("python-2"))
    await until_waiters(store, "mixed", 1)
    rust = await asyncio.create_subprocess_exec(
        str(rust_holder()),
        server.address,
        "mixed",
        "k",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert rust.stdin is not None and rust.stdout is not None
    try:
        await until_waiters(store, "mixed", 2)
        third = asyncio.create_task(python_waiter("python-3"))
        await until_waiters(store, "mixed", 3)

        await first.release()
        await asyncio.wait_for(second, 10)  # python-2 first
        held = (await asyncio.wait_for(rust.stdout.readline(), 10)).decode().split()
        assert held[0] == "held"
        order.append(f"rust {held[1]}")
        # The server's own view while the Rust client holds: python-3 still
        # stands in line (granted, it would have left it), not holding.
        stats = await store.stats("mixed")
        assert (stats["held_keys"], stats["waiters"]) == (1, 1)
        assert not third.done() and len(order) == 3
        rust.stdin.write(b"go\n")
        await rust.stdin.drain()
        assert (await asyncio.wait_for(rust.stdout.readline(), 10)) == b"released\n"
        await asyncio.wait_for(third, 10)
        names = [entry.split()[0] for entry in order]
        fences = [int(entry.split()[1]) for entry in order]
        assert names == ["python-1", "python-2", "rust", "python-3"]
        assert fences == sorted(fences) and len(set(fences)) == 4
    finally:
        if rust.returncode is None:
            rust.kill()
        await rust.wait()
