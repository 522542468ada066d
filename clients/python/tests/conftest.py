"""A real `holdline serve` per test, on a port it picks itself.

The binary is $HOLDLINE_BIN (an absolute path; CI sets it), else
<repo>/target/release/holdline.
"""

import abc
import asyncio
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable, Iterator, List, Optional, TypeVar, Union

import pytest

import holdline_client
from holdline_client._resp import Decoder

PATIENCE = 10.0
"""Seconds a test waits for what another task, process or server is to do
before it fails: far more than any of it takes, short enough to fail a
stuck test soon."""

REPO = Path(__file__).resolve().parents[3]
HOLDER = Path(__file__).resolve().parent / "holder.py"
TESTING = REPO / "clients" / "testing"
# The fixtures every client's tests share (cluster.py), imported as modules.
if str(TESTING) not in sys.path:
    sys.path.append(str(TESTING))


def server_binary() -> Path:
    configured = os.environ.get("HOLDLINE_BIN")
    path = Path(configured) if configured else REPO / "target" / "release" / "holdline"
    if not path.is_file():
        pytest.fail(
            f"no holdline binary at {path}: run `cargo build --release --bin holdline` "
            "at the repository root, or set HOLDLINE_BIN to its absolute path"
        )
    return path


async def until(
    check: Callable[[], Union[bool, Awaitable[bool]]], what: str, timeout: float = PATIENCE
) -> None:
    """Polls `check` (plain or async) every 10 ms until it is true; fails,
    saying `what` was awaited, past `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        done = check()
        if not isinstance(done, bool):
            done = await done
        if done:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout}s")
        await asyncio.sleep(0.01)


async def until_waiters(
    store: holdline_client.Store, lock: str, count: int, timeout: float = PATIENCE
) -> None:
    """Waits until `count` holds stand in the line of `lock` (its STATS)."""

    async def reached() -> bool:
        return bool((await store.stats(lock))["waiters"] == count)

    await until(reached, f"the line of {lock} reaching {count}", timeout)


async def hold_once(lock: holdline_client.Lock, key: holdline_client.Key, wait: str = "30s") -> int:
    """Waits up to `wait` in the line of `key`, then lets go as soon as it
    is granted; answers the grant's fence."""
    async with lock.hold(key, wait=wait) as lease:
        return lease.fence


class BackgroundHold:
    """A hold on one key kept by a task of its own until `release()`: what
    a test puts in the way of the holds it watches. Start it with
    `hold_in_background`, or make one to stand in line (`permits` and
    `exclusive` as `Lock.hold` takes them)."""

    def __init__(
        self,
        lock: holdline_client.Lock,
        key: holdline_client.Key,
        *,
        permits: Optional[int] = None,
        exclusive: bool = False,
    ) -> None:
        self.let_go = asyncio.Event()
        self._granted = asyncio.Event()
        self._lease: Optional[holdline_client.Lease] = None
        hold = lock.hold(key, wait="60s", permits=permits, exclusive=exclusive)
        self.task = asyncio.create_task(self._hold(hold))

    async def _hold(self, hold: holdline_client.Hold) -> None:
        async with hold as lease:
            self._lease = lease
            self._granted.set()
            await self.let_go.wait()

    @property
    def held(self) -> bool:
        """Whether it has been granted (it may have let go since)."""
        return self._granted.is_set()

    @property
    def lease(self) -> holdline_client.Lease:
        assert self._lease is not None, "not granted yet"
        return self._lease

    async def granted(self) -> None:
        """Waits for the grant; a hold that failed raises its error here."""
        grant = asyncio.ensure_future(self._granted.wait())
        await asyncio.wait(
            {grant, self.task}, timeout=PATIENCE, return_when=asyncio.FIRST_COMPLETED
        )
        grant.cancel()
        if self.task.done():
            self.task.result()
        assert self._granted.is_set(), f"not granted within {PATIENCE}s"

    async def release(self) -> None:
        """Leaves the hold's block and waits until the hold is done."""
        self.let_go.set()
        await asyncio.wait_for(self.task, PATIENCE)


async def hold_in_background(
    lock: holdline_client.Lock,
    key: holdline_client.Key,
    *,
    permits: Optional[int] = None,
    exclusive: bool = False,
) -> BackgroundHold:
    """Holds `key` in a task of its own; answers once it is granted."""
    held = BackgroundHold(lock, key, permits=permits, exclusive=exclusive)
    await held.granted()
    return held


@contextmanager
def refused_address() -> Iterator[str]:
    """`127.0.0.1:PORT` where nothing listens, while the block runs: a socket
    bound there but not listening, so connecting is refused and no other
    process can take the port meanwhile (a port found free and let go could
    be someone else's by the time the test connects)."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{bound.getsockname()[1]}"


_Closed = TypeVar("_Closed", bound="Closes")


class Closes(abc.ABC):
    """What a test starts and a `with` block ends (`close()`), whether the
    test passes or fails."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stops what was started; each kind says how."""

    def __enter__(self: _Closed) -> _Closed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Server(Closes):
    """One `holdline serve` process on a port it picks itself (`--listen
    127.0.0.1:0`, the address it prints first); its log goes to a file."""

    def __init__(self, *flags: str, listen: str = "127.0.0.1:0") -> None:
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            # SIGTERM drains for --drain-timeout: short, so stopping stays quick.
            [str(server_binary()), "serve", "--listen", listen, "--drain-timeout", "100ms", *flags],
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

    def close(self) -> None:
        """Stops it (a test may have stopped it already) and lets go of its log."""
        self.stop()
        self.log.close()


@pytest.fixture
def server() -> Iterator[Server]:
    with Server() as srv:
        yield srv


@pytest.fixture
async def store(server: Server) -> AsyncIterator[holdline_client.Store]:
    async with holdline_client.connect(server.address) as s:
        yield s


class Holder(Closes):
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


PROXY = TESTING / "frozen_proxy.py"


class Proxy(Closes):
    """`clients/testing/frozen_proxy.py` in front of a server: `freeze()`
    (SIGSTOP) stops every byte both ways while the sockets stay open."""

    def __init__(self, target: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(PROXY), target],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            ready = sel.select(15)
        line = self.proc.stdout.readline().strip() if ready else ""
        if not line.isdigit():
            self.close()
            raise RuntimeError(f"the proxy did not start: {line!r}")
        self.port = int(line)
        self.address = f"127.0.0.1:{self.port}"

    def freeze(self) -> float:
        """Stops the proxy; answers the monotonic time just before."""
        frozen_at = time.monotonic()
        self.proc.send_signal(signal.SIGSTOP)
        return frozen_at

    def thaw(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(timeout=15)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def proxy(server: Server) -> Iterator[Proxy]:
    with Proxy(server.address) as p:
        yield p


SINGLE_NODE = b"-ERR This instance has cluster support disabled\r\n"
"""What a server that is not part of a cluster answers to `CLUSTER ...` (Redis's words)."""

HANG_UP = b"hang up"
"""What a scripted server's handler answers to close the connection."""

Handler = Callable[[List[bytes]], Awaitable[Optional[bytes]]]

Listens = TypeVar("Listens", bound="Listening")


class Listening(abc.ABC):
    """A stand-in server's lifecycle: for its `async with` block it listens
    on a free port of 127.0.0.1 (`address`) and serves each connection
    with `_serve`; leaving the block stops listening."""

    def __init__(self) -> None:
        self._server: Optional[asyncio.AbstractServer] = None
        self.address = ""

    async def __aenter__(self: Listens) -> Listens:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @abc.abstractmethod
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serves one connection."""


class Scripted(Listening):
    """A stand-in server on a free port, for what a real one will not do on
    cue: it answers `HELLO` (unless told not to) and `CLUSTER` as a single
    node does (unless `single` is False), and hands every other command to
    `handler`, which answers the bytes to send, None to send nothing, or
    HANG_UP. One connection's commands are handled in order. `handover`:
    its `HELLO` map says `handover` = 1 (a node that can hand leases over)."""

    def __init__(
        self, handler: Handler, hello: bool = True, single: bool = True, handover: bool = False
    ) -> None:
        super().__init__()
        self._handler = handler
        self._hello = hello
        self._handover = handover
        self._single = hello and single
        self.commands: List[List[bytes]] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = Decoder()
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                for command in decoder.feed(data):
                    assert isinstance(command, list), "a command is an array"
                    args = [bytes(arg) for arg in command]
                    self.commands.append(args)
                    if self._hello and args[0].upper() == b"HELLO":
                        if self._handover:
                            writer.write(
                                b"%2\r\n$6\r\nserver\r\n$8\r\nholdline\r\n$8\r\nhandover\r\n:1\r\n"
                            )
                        else:
                            writer.write(b"%1\r\n$6\r\nserver\r\n$8\r\nholdline\r\n")
                        continue
                    if self._single and args[0].upper() == b"CLUSTER":
                        writer.write(SINGLE_NODE)
                        continue
                    answer = await self._handler(args)
                    if answer == HANG_UP:
                        return
                    if answer is not None:
                        writer.write(answer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


async def never_answer(command: List[bytes]) -> Optional[bytes]:
    return None
