"""A real `holdline serve` per test, on a free port of its own.

The binary is $HOLDLINE_BIN (an absolute path; CI sets it), else
<repo>/target/release/holdline.
"""

import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
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
    """One `holdline serve` process on a port it picks itself (`--listen
    127.0.0.1:0`, the address it prints first); its log goes to a file."""

    def __init__(self, *flags: str) -> None:
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [str(server_binary()), "serve", "--listen", "127.0.0.1:0", *flags],
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        assert self.proc.stdout is not None
        self.drain: Optional[threading.Thread] = None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            ready = sel.select(15)
        first = self.proc.stdout.readline().decode() if ready else ""
        prefix = "holdline: listening on "
        if not first.startswith(prefix):
            self.stop()
            raise RuntimeError(f"holdline serve did not start: {first!r}; log: {self.read_log()}")
        self.address = first[len(prefix) :].strip()
        self.port = int(self.address.rsplit(":", 1)[1])
        # Whatever else it prints must not fill a pipe and stall it.
        self.drain = threading.Thread(target=self._drain, daemon=True)
        self.drain.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for _ in self.proc.stdout:
            pass

    def read_log(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def terminate(self) -> int:
        """SIGTERM, as an operator stops it; answers its exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=15)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=15)
        if self.drain is not None:
            self.drain.join(5)  # it ends at end of file, once the process is gone
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    try:
        yield srv
    finally:
        srv.stop()
        srv.log.close()


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
        assert self.proc.stdout is not None
        self.drain: Optional[threading.Thread] = None
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
