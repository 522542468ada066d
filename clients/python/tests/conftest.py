"""A real `holdline serve` per test, on a free port of its own.

The binary is $HOLDLINE_BIN (an absolute path; CI sets it), else
<repo>/target/release/holdline.
"""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import AsyncIterator, Iterator, List, Optional

import pytest

import holdline

REPO = Path(__file__).resolve().parents[3]
HOLDER = Path(__file__).resolve().parent / "holder.py"


def server_binary() -> Path:
    configured = os.environ.get("HOLDLINE_BIN")
    path = Path(configured) if configured else REPO / "target" / "release" / "holdline"
    if not path.is_file():
        pytest.fail(
            f"no holdline binary at {path}: run `cargo build --release --bin holdline` "
            "at the repository root, or set HOLDLINE_BIN to its absolute path"
        )
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """One `holdline serve` process."""

    def __init__(self, *flags: str) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [str(server_binary()), "serve", "--listen", self.address, *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                out = self.proc.stdout.read().decode() if self.proc.stdout else ""
                raise RuntimeError(f"holdline serve exited {self.proc.returncode}: {out}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"holdline serve did not listen on {self.address}") from None
                time.sleep(0.02)

    def terminate(self) -> int:
        """SIGTERM, as an operator stops it; answers its exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=15)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=15)
        if self.proc.stdout:
            self.proc.stdout.close()


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
async def store(server: Server) -> AsyncIterator[holdline.Store]:
    s = await holdline.connect(server.address)
    try:
        yield s
    finally:
        await s.close()


class Holder:
    """A Python process holding one key (tests/holder.py); it reports on stdout."""

    def __init__(self, address: str, lock: str, key: str, *options: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HOLDER), address, lock, key, *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: List[str] = []

    def read_line(self, timeout: float = 15) -> str:
        """The holder's next line (blocking the test's thread: call it via
        asyncio.to_thread from async tests)."""
        import selectors

        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                raise TimeoutError(f"holder said nothing in {timeout}s")
        line = self.proc.stdout.readline().rstrip("\n")
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise RuntimeError(f"holder ended: {err}")
        self.lines.append(line)
        return line

    def send(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def close(self, sig: Optional[int] = signal.SIGKILL) -> None:
        if self.proc.poll() is None and sig is not None:
            try:
                self.proc.send_signal(signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.proc.send_signal(sig)
        self.proc.wait(timeout=15)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()
