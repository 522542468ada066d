"""Python tasks and a Rust client (holdline-client) in one FIFO line.

The Rust holder is the example `client/examples/holder.rs`: `holder ADDRESS
LOCK KEY` prints `held FENCE`, holds until a line on stdin, prints
`released`. Found at $HOLDLINE_RUST_HOLDER, else
<repo>/target/release/examples/holder (`cargo build --release -p
holdline-client --example holder`); the test is skipped without it.

The permits test adds a Go holder (`clients/go/cmd/holder`, the same
arguments and lines; both take `--permits N` and `--take M|all`), found at
$HOLDLINE_GO_HOLDER; it finds the Rust holder at $HOLDLINE_RUST_HOLDER
only, and is skipped unless both are set and there.
"""

import asyncio
import os
import subprocess
from pathlib import Path
from typing import List, Tuple

import pytest
from conftest import REPO, Server, hold_in_background, until, until_waiters

import holdline_client


def rust_holder() -> Path:
    configured = os.environ.get("HOLDLINE_RUST_HOLDER")
    path = Path(configured) if configured else REPO / "target" / "release" / "examples" / "holder"
    if not path.is_file():
        pytest.skip(
            f"no Rust holder at {path} (cargo build --release -p holdline-client --example holder)"
        )
    return path


def configured_holder(variable: str, build: str) -> Path:
    """The holder binary at $`variable`; the test is skipped without it.
    (No default path: a holder built before permits there would not know
    `--permits` and `--take`.)"""
    configured = os.environ.get(variable)
    if not configured:
        pytest.skip(f"no holder with permits: set {variable} to a build of it ({build})")
    path = Path(configured)
    if not path.is_file():
        pytest.skip(f"no holder at {path} (${variable}; {build})")
    return path


async def test_fifo_across_python_tasks_and_a_rust_client(
    server: Server, store: holdline_client.Store
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


class Process:
    """A holder binary (Rust or Go) in a process of its own: `held FENCE`
    once granted, then it holds until `release()` sends it a line."""

    def __init__(self, proc: "asyncio.subprocess.Process") -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc, self.stdin, self.stdout = proc, proc.stdin, proc.stdout

    @classmethod
    async def start(cls, binary: Path, *args: str) -> "Process":
        proc = await asyncio.create_subprocess_exec(
            str(binary), *args, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        return cls(proc)

    async def held(self) -> int:
        line = (await asyncio.wait_for(self.stdout.readline(), 10)).decode().split()
        assert line[:1] == ["held"], f"the holder said {line}"
        return int(line[1])

    async def release(self) -> None:
        self.stdin.write(b"go\n")
        await self.stdin.drain()
        assert (await asyncio.wait_for(self.stdout.readline(), 10)) == b"released\n"

    async def end(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()


async def line_of(store: holdline_client.Store, key: str) -> Tuple[int, int, int]:
    """(holders, permits held, waiters) of key `key` of the lock "rw"."""
    state = await store.lock("rw", permits=8).inspect(key)
    assert state is not None
    return state.holders, state.permits_held, state.waiters


async def test_a_go_writer_waits_for_a_python_reader_and_a_rust_reader_for_it(
    server: Server, store: holdline_client.Store
) -> None:
    rust_binary = configured_holder(
        "HOLDLINE_RUST_HOLDER", "cargo build --release -p holdline-client --example holder"
    )
    go_binary = configured_holder(
        "HOLDLINE_GO_HOLDER", "cd clients/go && go build -o HOLDER ./cmd/holder"
    )
    python_reader = await hold_in_background(store.lock("rw", permits=8), "k")
    started: List[Process] = []
    try:
        # The line: the Go writer (all 8 permits), then the Rust reader (one).
        go_writer = await Process.start(
            go_binary, server.address, "rw", "k", "--permits", "8", "--take", "all"
        )
        started.append(go_writer)
        await until_waiters(store, "rw", 1)
        rust_reader = await Process.start(rust_binary, server.address, "rw", "k", "--permits", "8")
        started.append(rust_reader)
        await until_waiters(store, "rw", 2)
        # The Rust reader would fit beside the Python one, but may not overtake.
        assert await line_of(store, "k") == (1, 1, 2)

        await python_reader.release()
        writer_fence = await go_writer.held()
        assert writer_fence > python_reader.lease.fence
        assert await line_of(store, "k") == (1, 8, 1)  # the Rust reader still waits

        await go_writer.release()
        reader_fence = await rust_reader.held()
        assert reader_fence > writer_fence
        assert await line_of(store, "k") == (1, 1, 0)
        await rust_reader.release()

        async def freed() -> bool:
            state = await store.lock("rw", permits=8).inspect("k")
            return state is None or (state.holders, state.waiters) == (0, 0)

        await until(freed, "the key let go")
    finally:
        for process in started:
            await process.end()
