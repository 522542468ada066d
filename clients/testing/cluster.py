#!/usr/bin/env python3
"""A private holdline cluster for the clients' tests: one etcd and N nodes.

    python3 cluster.py [--nodes 3] [--partitions 8] [--etcd-ttl 2] [--max-ttl 10s]
                       [--binary PATH]
    python3 cluster.py --self-test

Starts `/usr/bin/etcd` on free loopback ports with its own temporary data
directory (never the system's service; ports taken meanwhile are retried),
then N `holdline serve` nodes on loopback ports each binds itself
(`--listen 127.0.0.1:0 --advertise 127.0.0.1:0`, the address read from its
first line; the binary: --binary, else $HOLDLINE_BIN, else
target/release/holdline under the repository root), waits until every
node's CLUSTER SLOTS covers all 16384 slots, all nodes answer the same map
and the partitions are spread evenly over the nodes, then prints ONE JSON
line to stdout:

    {"etcd": "http://127.0.0.1:E", "max_ttl": "10s",
     "nodes": [{"addr": "127.0.0.1:P", "pid": 1234, "slots": [[0, 2047], ...]}, ...]}

("slots": the ranges the node served when the line was printed; "max_ttl":
the --max-ttl every node got).

Every node gets `--max-ttl` (`10s`, `2500ms`; the server's default `10s`):
the longest ttl a hold may ask for, and how long a partition taken over
WITHOUT a hand-over (its node killed or frozen) grants nothing after the
new owner's claim (TRYHOLD answers null, HOLD waits; a HOLD whose wait ends
first fails INUSE). A test that kills a node and holds its keys again
allows etcd ttl + max ttl + a little; a short `--max-ttl` (say `2s`) makes
that quick, but then every hold must ask for a ttl of at most that (a
larger one is refused INVALID). The cluster keeps the max ttl of its first
node (etcd holds it), so every node gets the same one.

It then runs until its standard input closes or it gets SIGTERM/SIGINT, and
kills every node and etcd (SIGKILL, then waits for them) and removes its
temporary directories. Tests kill or stop nodes by pid themselves.

While it runs, a line on its standard input is a request, answered with one
JSON line: `kill I` (SIGKILL node I and wait for it), `start I` (start node
I again, on a port it binds anew: answers its {"addr", "pid"}), `wait`
(until the live nodes cover every slot again). A bad line answers
{"error": "..."}.

From Python (standard library only):

    with Cluster(nodes=3, max_ttl="2s") as c:
        c.nodes[0].addr, c.nodes[0].pid, c.etcd, c.max_ttl
        c.key_on(1)       # a key whose slot node 1 serves
        c.kill(1)         # SIGKILL node 1
        c.wait_covered()  # the others took its slots over
        c.start(1)        # node 1 again (c.nodes[1].addr: its new address)
"""

from __future__ import annotations

import argparse
import binascii
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Dict, List, Optional, Tuple, Union

SLOTS = 16384
REPO = Path(__file__).resolve().parents[2]
ETCD = "/usr/bin/etcd"
LISTENING = "holdline: listening on "
STOPPED = (None, 0, -signal.SIGKILL, -signal.SIGTERM, -signal.SIGINT)
"""A node's exit statuses (None: running) that a test may have caused."""

Reply = Union[None, int, bytes, str, "RespError", List[Any], Dict[Any, Any]]
Range = Tuple[int, int, str]
"""A served range of slots: first, last (inclusive), the node's host:port."""


# ---------------------------------------------------------------- slots


def slot(key: Union[str, bytes]) -> int:
    """Redis Cluster's slot of a key: CRC16-XMODEM mod 16384, `{tag}` hashed alone."""
    data = key.encode() if isinstance(key, str) else key
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    return binascii.crc_hqx(data, 0) % SLOTS


# ---------------------------------------------------------------- RESP


class RespError(Exception):
    """An error reply (`-ERR ...`)."""


def _read_line(f: IO[bytes]) -> bytes:
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("connection closed mid-reply")
    return line[:-2]


class Push(list):  # type: ignore[type-arg]
    """A RESP3 push (`>`), told apart from an array reply."""


def read_frame(f: IO[bytes]) -> Reply:
    """The next frame: a reply, or a [`Push`]."""
    line = _read_line(f)
    if line[:1] == b">":
        return Push(_read_reply(f) for _ in range(int(line[1:])))
    return _reply_of(line, f)


def _read_reply(f: IO[bytes]) -> Reply:
    return _reply_of(_read_line(f), f)


def _reply_of(line: bytes, f: IO[bytes]) -> Reply:
    kind, rest = line[:1], line[1:]
    if kind in (b"+",):
        return rest.decode()
    if kind in (b"-", b"!"):
        if kind == b"!":
            rest = f.read(int(rest) + 2)[:-2]
        return RespError(rest.decode(errors="replace"))
    if kind == b":":
        return int(rest)
    if kind in (b"$", b"="):
        if int(rest) < 0:
            return None
        return f.read(int(rest) + 2)[:-2]
    if kind in (b"*", b"~", b">"):
        return None if int(rest) < 0 else [_read_reply(f) for _ in range(int(rest))]
    if kind in (b"%", b"|"):
        pairs = [(_read_reply(f), _read_reply(f)) for _ in range(int(rest))]
        return {(k.decode() if isinstance(k, bytes) else k): v for k, v in pairs}
    if kind == b"_":
        return None
    if kind in (b",", b"("):
        return rest.decode()
    if kind == b"#":
        return int(rest == b"t")
    raise ConnectionError(f"not RESP: {line!r}")


def command(addr: str, *args: Union[str, bytes, int], timeout: float = 5.0) -> Reply:
    """Sends one command to host:port on a fresh plain connection (RESP2)
    and answers its reply; an error reply is answered (not raised) as a
    RespError. Raises OSError when the node cannot be reached."""
    host, _, port = addr.rpartition(":")
    parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    frame = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
        sock.sendall(frame)
        with sock.makefile("rb") as f:
            return _read_reply(f)


def cluster_slots(addr: str) -> List[Range]:
    """A node's CLUSTER SLOTS as sorted (first, last, host:port) ranges."""
    reply = command(addr, "CLUSTER", "SLOTS")
    if isinstance(reply, RespError):
        raise reply
    if not isinstance(reply, list):
        raise ConnectionError(f"CLUSTER SLOTS answered {reply!r}")
    ranges = []
    for entry in reply:
        host, port = entry[2][0], entry[2][1]
        host = host.decode() if isinstance(host, bytes) else str(host)
        ranges.append((int(entry[0]), int(entry[1]), f"{host}:{int(port)}"))
    return sorted(ranges)


def _covers_all(ranges: List[Range]) -> bool:
    nxt = 0
    for first, last, _ in ranges:
        if first != nxt:
            return False
        nxt = last + 1
    return nxt == SLOTS


# ---------------------------------------------------------------- processes


def duration_flag(value: Union[str, float]) -> str:
    """The server's `--max-ttl` text (`10s`, `2500ms`) of a text like that
    or of a number of seconds (2 -> `2s`, 2.5 -> `2500ms`)."""
    if isinstance(value, str):
        duration_seconds(value)  # raises ValueError for a bad text
        return value
    ms = round(float(value) * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def duration_seconds(text: str) -> float:
    """Seconds of `10s` or `2500ms` (the server's --max-ttl forms)."""
    try:
        if text.endswith("ms"):
            return int(text[:-2]) / 1000
        if text.endswith("s"):
            return float(int(text[:-1]))
    except ValueError:
        pass
    raise ValueError(f"max ttl {text!r}: want whole seconds or milliseconds, e.g. 10s or 2500ms")


def port_to_try() -> int:
    """A port free now, for etcd (which cannot bind port 0 and say where): it
    may be taken before etcd binds it, so etcd's start is retried then."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def server_binary(binary: Optional[str] = None) -> Path:
    configured = binary or os.environ.get("HOLDLINE_BIN")
    path = Path(configured) if configured else REPO / "target" / "release" / "holdline"
    if not path.is_file():
        raise FileNotFoundError(
            f"no holdline binary at {path}: run `cargo build --release --bin holdline` "
            "at the repository root, or set HOLDLINE_BIN to its absolute path"
        )
    return path


def _kill(proc: Optional[subprocess.Popen[bytes]]) -> None:
    if proc is None:
        return
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGCONT)  # a test may have stopped it
            proc.kill()
        except ProcessLookupError:
            pass
    proc.wait(timeout=15)
    if proc.stdout is not None:
        proc.stdout.close()


def _port_taken(log: Path, mark: int) -> bool:
    """Whether a log says, after byte `mark`, that a port was taken (etcd's
    `bind: address already in use`)."""
    try:
        with open(log, "rb") as f:
            f.seek(mark)
            return b"address already in use" in f.read()
    except OSError:
        return False


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@dataclass
class Node:
    """One `holdline serve` of the cluster: its address (the port it bound;
    a restart binds another), its process and its log file."""

    index: int
    port: int
    log: Path
    proc: Optional[subprocess.Popen[bytes]] = None
    drain: Optional[threading.Thread] = field(default=None, repr=False)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"node {self.index} never started"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Cluster:
    """etcd and `nodes` holdline nodes on loopback; a context manager (also
    `start_all()` / `close()`). Every wait raises TimeoutError naming what
    it saw, with the end of the logs."""

    def __init__(
        self,
        nodes: int = 3,
        partitions: int = 8,
        etcd_ttl: float = 2,
        binary: Optional[str] = None,
        timeout: float = 30,
        max_ttl: Union[str, float] = "10s",
    ) -> None:
        self.binary = server_binary(binary)
        self.partitions = partitions
        self.etcd_ttl = etcd_ttl
        self.max_ttl = duration_flag(max_ttl)
        self.max_ttl_seconds = duration_seconds(self.max_ttl)
        self.timeout = timeout
        shm = Path("/dev/shm")
        tmp = shm if shm.is_dir() else None
        self.dir = Path(tempfile.mkdtemp(prefix="holdline-cluster-", dir=tmp))
        self.etcd = ""
        self.etcd_proc: Optional[subprocess.Popen[bytes]] = None
        self.nodes = [Node(i, 0, self.dir / f"node{i}.log") for i in range(nodes)]

    def __enter__(self) -> Cluster:
        try:
            self.start_all()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_all(self) -> None:
        self._start_etcd()
        for node in self.nodes:
            self._spawn(node)
        for node in self.nodes:
            self._await_listening(node)
        self.wait_ready()

    def close(self) -> None:
        for node in self.nodes:
            _kill(node.proc)
            if node.drain is not None:
                node.drain.join(5)
        _kill(self.etcd_proc)
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------ etcd

    def _start_etcd(self) -> None:
        """etcd on ports free a moment ago; when its log says one was taken
        meanwhile, again on others (any other failure is final)."""
        log_path = self.dir / "etcd.log"
        for _ in range(5):
            client, peer = port_to_try(), port_to_try()
            self.etcd = f"http://127.0.0.1:{client}"
            peer_url = f"http://127.0.0.1:{peer}"
            data = self.dir / "etcd"
            shutil.rmtree(data, ignore_errors=True)
            with open(log_path, "ab") as log:
                mark = log_path.stat().st_size  # this try's lines follow
                self.etcd_proc = subprocess.Popen(
                    [ETCD, "--name", "fixture", "--data-dir", str(data),
                     "--listen-client-urls", self.etcd, "--advertise-client-urls", self.etcd,
                     "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                     "--initial-cluster", f"fixture={peer_url}",
                     "--initial-cluster-token", self.dir.name,
                     "--heartbeat-interval", "20", "--election-timeout", "200"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                )  # fmt: skip
            if self._await_etcd_health(log_path, mark):
                return
            _kill(self.etcd_proc)
            if not _port_taken(log_path, mark):
                break
        raise TimeoutError(f"etcd did not become healthy; log:\n{_tail(log_path)}")

    def _await_etcd_health(self, log: Path, mark: int) -> bool:
        """Until etcd says it is healthy (True), or exits, or its log after
        `mark` says a port was taken, or 15 s pass (False)."""
        deadline = time.monotonic() + 15
        assert self.etcd_proc is not None
        while (
            time.monotonic() < deadline
            and self.etcd_proc.poll() is None
            and not _port_taken(log, mark)
        ):
            try:
                with urllib.request.urlopen(f"{self.etcd}/health", timeout=2) as answer:
                    if json.load(answer).get("health") == "true":
                        return True
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        return False

    # ------------------------------------------------------------ nodes

    def _spawn(self, node: Node) -> None:
        """Starts node on a port it binds itself, advertised as that port
        (`:0`); _await_listening reads which from its first line."""
        node.port = 0  # not known until then
        with open(node.log, "ab") as log:
            node.proc = subprocess.Popen(
                [str(self.binary), "serve", "--listen", "127.0.0.1:0", "--advertise", "127.0.0.1:0",
                 "--etcd", self.etcd, "--cluster", "fixture",
                 "--partitions", str(self.partitions), "--etcd-ttl", f"{self.etcd_ttl:g}s",
                 "--max-ttl", self.max_ttl],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
            )  # fmt: skip

    def _await_listening(self, node: Node) -> None:
        """Reads the node's first line, `holdline: listening on 127.0.0.1:PORT`:
        its port from now on."""
        assert node.proc is not None and node.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(node.proc.stdout, selectors.EVENT_READ)
            ready = sel.select(15)
        first = node.proc.stdout.readline().decode(errors="replace") if ready else ""
        if not first.startswith(LISTENING):
            _kill(node.proc)
            raise RuntimeError(
                f"node {node.index} did not start: {first!r}; log:\n{_tail(node.log)}"
            )
        node.port = int(first[len(LISTENING) :].strip().rsplit(":", 1)[1])
        node.drain = threading.Thread(target=_drain, args=(node.proc,), daemon=True)
        node.drain.start()

    def kill(self, i: int) -> None:
        """SIGKILL node i and wait for it to be gone."""
        _kill(self.nodes[i].proc)

    def start(self, i: int) -> None:
        """Starts node i again (after kill) on a port it binds anew (its old
        one may be someone else's by now; nodes[i].addr says which), then
        waits until the cluster's map is whole and even again."""
        node = self.nodes[i]
        if node.alive():
            raise RuntimeError(f"node {i} is running (pid {node.pid})")
        self._spawn(node)
        self._await_listening(node)
        self.wait_ready()

    # ------------------------------------------------------------ maps

    def slots_map(self, i: Optional[int] = None) -> List[Range]:
        """CLUSTER SLOTS of node i (else of the first live node)."""
        live = [n for n in self.nodes if n.alive()] if i is None else [self.nodes[i]]
        if not live:
            raise RuntimeError("no node is running")
        return cluster_slots(live[0].addr)

    def owner(self, key: Union[str, bytes]) -> int:
        """The index of the node that serves key's slot now."""
        s = slot(key)
        for first, last, addr in self.slots_map():
            if first <= s <= last:
                return next(n.index for n in self.nodes if n.addr == addr)
        raise LookupError(f"no node serves slot {s}")

    def key_on(self, i: int, prefix: str = "key-") -> str:
        """The first of prefix0, prefix1, ... whose slot node i serves now."""
        ranges = [(a, b) for a, b, addr in self.slots_map() if addr == self.nodes[i].addr]
        for n in range(100_000):
            key = f"{prefix}{n}"
            if any(a <= slot(key) <= b for a, b in ranges):
                return key
        raise LookupError(f"node {i} serves no slot")

    def _maps(self) -> Tuple[Dict[str, List[Range]], List[str]]:
        maps, problems = {}, []
        for node in self.nodes:
            if not node.alive():
                continue
            try:
                maps[node.addr] = cluster_slots(node.addr)
            except (OSError, RespError) as e:
                problems.append(f"{node.addr}: {e}")
        return maps, problems

    def _wait(self, check: str, timeout: Optional[float]) -> Dict[str, List[Range]]:
        """Polls the live nodes' maps until they agree and the live nodes
        serve every slot (check "covered"), spread evenly ("even")."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            maps, problems = self._maps()
            views = list(maps.values())
            why = "; ".join(problems)
            if not why and views:
                if any(v != views[0] for v in views):
                    why = f"the nodes disagree: {maps}"
                elif not _covers_all(views[0]):
                    why = f"not every slot is served: {views[0]}"
                elif any(addr not in maps for _, _, addr in views[0]):
                    why = f"slots still on a node that is down: {views[0]}"
                elif check == "even":
                    why = self._uneven(views[0], list(maps))
            if views and not why:
                return maps
            for node in self.nodes:
                if node.proc is not None and node.proc.poll() not in STOPPED:
                    raise RuntimeError(
                        f"node {node.index} exited {node.proc.returncode}; log:\n{_tail(node.log)}"
                    )
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- node {n.index}\n{_tail(n.log)}" for n in self.nodes)
                raise TimeoutError(f"cluster not {check}: {why or 'no live node'}\n{logs}")
            time.sleep(0.05)

    def _uneven(self, ranges: List[Range], live: List[str]) -> str:
        """Why the partitions are not spread evenly over `live` ('' if they are)."""
        per: Dict[str, int] = {addr: 0 for addr in live}
        for first, last, addr in ranges:
            per[addr] = per.get(addr, 0) + last - first + 1
        p, n = self.partitions, len(live)
        low = (p // n) * (SLOTS // p)
        high = -(-p // n) * -(-SLOTS // p)
        if all(low <= count <= high for count in per.values()):
            return ""
        return f"slots per node {per} not within [{low}, {high}]"

    def wait_covered(self, timeout: Optional[float] = None) -> Dict[str, List[Range]]:
        """Until the live nodes agree on a map that covers every slot."""
        return self._wait("covered", timeout)

    def wait_ready(self, timeout: Optional[float] = None) -> Dict[str, List[Range]]:
        """Until the live nodes agree on a whole map spread evenly over them."""
        return self._wait("even", timeout)

    def describe(self) -> Dict[str, Any]:
        """What the JSON line says: etcd's URL, each node's addr, pid and slots."""
        ranges = self.slots_map()
        nodes = []
        for node in self.nodes:
            mine = [[a, b] for a, b, addr in ranges if addr == node.addr]
            nodes.append({"addr": node.addr, "pid": node.pid, "slots": mine})
        return {"etcd": self.etcd, "max_ttl": self.max_ttl, "nodes": nodes}


def _drain(proc: subprocess.Popen[bytes]) -> None:
    """Reads a node's stdout to its end, so it never fills the pipe."""
    assert proc.stdout is not None
    try:
        for _ in proc.stdout:
            pass
    except (OSError, ValueError):
        pass


# ---------------------------------------------------------------- command line


def _request(c: Cluster, line: str) -> Dict[str, Any]:
    """One request line from stdin: `kill I`, `start I` or `wait`."""
    words = line.split()
    try:
        if words == ["wait"]:
            c.wait_covered()
            return {"ok": True}
        if len(words) == 2 and words[0] in ("kill", "start"):
            i = int(words[1])
            if not 0 <= i < len(c.nodes):
                raise IndexError(f"no node {i}")
            if words[0] == "kill":
                c.kill(i)
                return {"ok": True}
            c.start(i)
            return {"addr": c.nodes[i].addr, "pid": c.nodes[i].pid}
    except (ValueError, IndexError, RuntimeError, TimeoutError, OSError) as e:
        return {"error": str(e)}
    return {"error": f"unknown request {line.strip()!r} (kill I, start I, wait)"}


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _cluster(args: argparse.Namespace) -> Cluster:
    return Cluster(args.nodes, args.partitions, args.etcd_ttl, args.binary, max_ttl=args.max_ttl)


def serve(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    with _cluster(args) as c:
        print(json.dumps(c.describe()), flush=True)
        for line in sys.stdin:
            if line.strip():
                print(json.dumps(_request(c, line)), flush=True)
    return 0


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(what)
    print(f"ok: {what}", file=sys.stderr)


def self_test(args: argparse.Namespace) -> int:
    """Starts a cluster, checks what the tests rely on, and a second one
    through the command line, then exits 0 (or raises)."""
    vectors = {"123456789": 12739, "foo": 12182, "{user1000}.following": slot("user1000")}
    vectors.update({"foo{}{bar}": slot("foo{}{bar}"), "foo{{bar}}zap": slot("{bar")})
    _check(slot("123456789") == 12739 and slot("foo") == 12182, "slot() matches Redis's vectors")
    started = time.monotonic()
    with _cluster(args) as c:
        took = time.monotonic() - started
        _check(True, f"{args.nodes} nodes ready in {took:.1f}s: {c.describe()}")
        for key, want in vectors.items():
            got = command(c.nodes[0].addr, "CLUSTER", "KEYSLOT", key)
            _check(got == want, f"CLUSTER KEYSLOT {key} = {got!r} (want {want})")
        keys = [c.key_on(i) for i in range(len(c.nodes))]
        _check(len(set(keys)) == len(keys), f"a key on every node: {keys}")
        if len(c.nodes) > 1:
            moved = command(c.nodes[0].addr, "INSPECT", "fixture", keys[1])
            redirect = f"MOVED {slot(keys[1])} {c.nodes[1].addr}"
            _check(str(moved) == redirect, f"INSPECT via a non-owner: {moved!r} (want {redirect})")
            _self_test_max_ttl(c, keys[0])
            victim = len(c.nodes) - 1
            killed = time.monotonic()
            c.kill(victim)
            c.wait_covered(timeout=args.etcd_ttl + 10)
            took = time.monotonic() - killed
            _check(c.owner(keys[victim]) != victim, f"node {victim} killed: covered in {took:.1f}s")
            _self_test_take_over(c, keys[victim], killed)
            c.start(victim)
            _check(c.nodes[victim].alive(), f"node {victim} restarted: {c.describe()}")
            # Handed over cleanly (rebalancing): granted at once.
            back = c.key_on(victim, prefix="back-")
            got = command(c.nodes[victim].addr, "TRYHOLD", "fixture", back, "TTL", ttl_ms(c))
            _check(isinstance(got, list), f"after a hand-over: TRYHOLD granted at once ({got!r})")
    _self_test_command_line(args)
    print("self-test passed", file=sys.stderr)
    return 0


def ttl_ms(c: Cluster) -> int:
    """A lease ttl (ms) the cluster allows: 1 s, or its max ttl if lower."""
    return min(1000, round(c.max_ttl_seconds * 1000))


def _self_test_max_ttl(c: Cluster, key: str) -> None:
    """A hold asking more than the cluster's max ttl is refused INVALID."""
    over = round(c.max_ttl_seconds * 1000) + 1000
    got = command(c.nodes[0].addr, "TRYHOLD", "fixture", key, "TTL", over)
    want = (
        f'INVALID lock fixture: key "{key}": ttl {duration_text(over)} is above '
        f"the cluster's max ttl ({duration_text(round(c.max_ttl_seconds * 1000))}): invalid"
    )
    _check(str(got) == want, f"TRYHOLD TTL {over}: {got!r}")
    got = command(c.nodes[0].addr, "TRYHOLD", "fixture", key, "TTL", ttl_ms(c))
    _check(isinstance(got, list), f"TRYHOLD TTL {ttl_ms(c)} (within the max): granted {got!r}")


def duration_text(ms: int) -> str:
    """A duration as the server's texts write it (`10s`, `2500ms`)."""
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _self_test_take_over(c: Cluster, key: str, killed: float) -> None:
    """After a take-over without a hand-over (a SIGKILL), the new owner
    grants nothing for the max ttl (TRYHOLD null, a short HOLD INUSE),
    then grants."""
    owner = c.nodes[c.owner(key)].addr
    got = command(owner, "TRYHOLD", "fixture", key, "TTL", ttl_ms(c))
    _check(got is None, f"right after the take-over: TRYHOLD answers null ({got!r})")
    got = command(owner, "HOLD", "fixture", key, "WAIT", 50, "TTL", ttl_ms(c))
    want = f'INUSE lock fixture: key "{key}": held past the hold\'s wait: in use'
    _check(str(got) == want, f"right after the take-over: HOLD WAIT 50 fails {got!r}")
    limit = c.etcd_ttl + c.max_ttl_seconds + 5
    while True:
        got = command(owner, "TRYHOLD", "fixture", key, "TTL", ttl_ms(c))
        took = time.monotonic() - killed
        if isinstance(got, list) or took > limit:
            break
        time.sleep(0.05)
    _check(isinstance(got, list), f"granted {took:.1f}s after the kill (at most {limit:g}s)")


def _self_test_command_line(args: argparse.Namespace) -> None:
    """The script as the other languages' tests run it: one JSON line,
    requests on stdin, everything gone once stdin closes."""
    flags = ["--nodes", "2", "--partitions", str(args.partitions), "--etcd-ttl", str(args.etcd_ttl)]
    flags += ["--max-ttl", args.max_ttl]
    if args.binary:
        flags += ["--binary", args.binary]
    proc = subprocess.Popen(
        [sys.executable, __file__, *flags], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        info = json.loads(proc.stdout.readline())
        pids = [n["pid"] for n in info["nodes"]]
        _check(len(pids) == 2 and info["etcd"].startswith("http://127.0.0.1:"), f"JSON line {info}")
        _check(info["max_ttl"] == args.max_ttl, f"the JSON line's max_ttl is {args.max_ttl}")
        proc.stdin.write("bogus\n")
        proc.stdin.flush()
        _check("error" in json.loads(proc.stdout.readline()), "a bad request answers an error")
        proc.stdin.close()
        _check(proc.wait(timeout=20) == 0, "stdin closed: the script exits 0")
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive = True
            except ProcessLookupError:
                alive = False
            _check(not alive, f"node pid {pid} is gone")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--etcd-ttl", type=float, default=2, help="seconds")
    parser.add_argument(
        "--max-ttl",
        help="every node's --max-ttl (10s, 2500ms; default 10s, 2s for --self-test)",
    )
    parser.add_argument("--binary", help="the holdline binary (else $HOLDLINE_BIN, else ...)")
    parser.add_argument("--self-test", action="store_true", help="start, check, stop, exit 0")
    args = parser.parse_args()
    if args.max_ttl is None:
        args.max_ttl = "2s" if args.self_test else "10s"
    try:
        duration_seconds(args.max_ttl)
    except ValueError as e:
        parser.error(str(e))
    return self_test(args) if args.self_test else serve(args)


if __name__ == "__main__":
    sys.exit(main())
