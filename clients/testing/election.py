#!/usr/bin/env python3
"""The election checker: one `holdline serve`, a frozen proxy, three
campaigner processes and one observer of one client language (the
program of CAMPAIGNER.md), the leader broken three ways, and every line
they printed judged.

    python3 election.py --campaigner 'CMD ARGS...' [--ttl-ms 2000]
                        [--binary PATH] [--keep DIR] [--with-mutant]
    python3 election.py --self-test

`--campaigner` is the command line before the per-process arguments
(split as a shell would, `shlex.split`; default: the Python campaigner,
`python3 election_campaigner.py`). The server is `--binary`, else
$HOLDLINE_BIN, else target/release/holdline, started with `serve --listen
127.0.0.1:0` (its first line says where it listens). The scenario, with
ttl T:

1. Campaigner A through the frozen proxy, until it prints `elected`; then
   B and C direct, and one observer. Each fault below waits first until
   the line is settled: the key held, the other campaigners in its line
   (INSPECT's waiters), the observer told the leader's fence.
2. (a) The proxy frozen (SIGSTOP) while A leads; thawed once another is
   elected. (b) The leader SIGSTOPped; SIGCONT once another is elected.
   (c) The leader SIGKILLed; a fresh campaigner D started in its place.
3. A second after the line settles, everything is stopped and judged.

The rules (CAMPAIGNER.md's):
- **One leader at a time.** A campaigner's belief of fence F runs from
  its `elected` to its last `leading` of F (just its `elected` when it
  printed none); no two beliefs overlap (one starting at or before
  another's end, of a different campaigner or fence, is an overlap).
- **Fences rise.** Beliefs, in the order they began, have rising fences.
- **The register refuses a lower fence.** Every `elected` and `leading`
  line is a write of its fence to a register kept here, outside the
  system, in CLOCK_MONOTONIC order across the processes; a write below
  the highest fence already written is refused and reported.
- **Elected again in time.** After each fault, a campaigner other than
  the one broken prints `elected` within T + 1 s of the fault.
- **Observers are told.** Every fence elected is `observed` within 1 s of
  its `elected` (an observation printed before the `elected` counts); the
  observer's leaders come in fence order (never a lower fence after a
  higher one; the same one again is a proclaim or a reconnection).
- **The program behaves.** Every line is one JSON object of the events
  CAMPAIGNER.md lists, each process says `ready` first, and none exits
  unless it was killed.

`--with-mutant` gives A `--ignores-loss` (the Python campaigner's mutant,
which never looks at its leadership): it must be caught, an overlap in
(a). `--self-test` runs the Python campaigner plainly (it must pass), then
with the mutant (it must fail with an overlap), and exits 0 only if both
did. Exit status: 0 no violation, 1 violations, 2 the run could not be set
up. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cluster as fixture  # noqa: E402
from nemesis import Proxy  # noqa: E402
from nemesis_check import Checked  # noqa: E402

HERE = Path(__file__).resolve().parent
PYTHON_CAMPAIGNER = (
    f"{shlex.quote(sys.executable)} {shlex.quote(str(HERE / 'election_campaigner.py'))}"
)
LOCK = "election"
NAME = "leader"
NS = 1_000_000_000
MS = 1_000_000
OBSERVED_WITHIN_NS = NS
REELECTED_SLACK_NS = NS
PATIENCE_S = 15.0
"""How long a step waits for what it needs (an election, a settled line)."""
EVENTS = {"ready", "elected", "leading", "lost", "error", "observed"}


def say(text: str) -> None:
    print(f"election: {text}", flush=True)


class SetupError(Exception):
    """The run could not be set up (exit status 2)."""


# ---------------------------------------------------------------- processes


@dataclass
class Proc:
    """One campaigner or observer process and every line it printed."""

    name: str
    popen: subprocess.Popen[bytes]
    stderr: Path
    lines: List[Dict[str, Any]] = field(default_factory=list)
    bad: List[str] = field(default_factory=list)
    killed: bool = False
    stopped: bool = False
    reader: Optional[threading.Thread] = None

    def read(self, cond: threading.Condition) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            text = raw.decode(errors="replace").strip()
            if not text:
                continue
            try:
                line = json.loads(text)
                if not isinstance(line, dict):
                    raise ValueError("not an object")
            except ValueError:
                with cond:
                    self.bad.append(text)
                continue
            with cond:
                self.lines.append(line)
                cond.notify_all()

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            try:
                os.kill(self.popen.pid, sig)
            except ProcessLookupError:
                pass


class World:
    """The server, the proxy and the processes of one run."""

    def __init__(self, args: argparse.Namespace, dir: Path, mutant: bool) -> None:
        self.args = args
        self.dir = dir
        self.mutant = mutant
        self.ttl_ms: int = args.ttl_ms
        self.command = shlex.split(args.campaigner)
        self.cond = threading.Condition()
        self.procs: Dict[str, Proc] = {}
        self.server: Optional[subprocess.Popen[bytes]] = None
        self.proxy: Optional[Proxy] = None
        self.addr = ""
        self.faults: List[Tuple[str, str, int]] = []  # (what, victim, t)
        self.lining: List[str] = []  # campaigners expected in the line
        self.notes: List[str] = []

    # -- setting up

    def start_server(self) -> None:
        binary = fixture.server_binary(self.args.binary)
        log = open(self.dir / "server.log", "ab")
        self.server = subprocess.Popen(
            [str(binary), "serve", "--listen", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
        )  # fmt: skip
        log.close()
        assert self.server.stdout is not None
        first = self.server.stdout.readline().decode(errors="replace")
        if not first.startswith(fixture.LISTENING):
            raise SetupError(f"the server did not start: {first!r}")
        self.addr = first[len(fixture.LISTENING) :].strip()
        threading.Thread(target=fixture._drain, args=(self.server,), daemon=True).start()
        self.proxy = Proxy(self.addr)

    def spawn(self, name: str, addr: str, extra: List[str]) -> Proc:
        args = ["--addr", addr, "--lock", LOCK, "--name", NAME] + extra
        stderr = self.dir / f"{name}.stderr"
        with open(stderr, "ab") as err:
            try:
                popen = subprocess.Popen(
                    self.command + args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=err,
                )  # fmt: skip
            except OSError as e:
                raise SetupError(f"cannot start {self.args.campaigner!r}: {e}") from None
        proc = Proc(name, popen, stderr)
        proc.reader = threading.Thread(target=proc.read, args=(self.cond,), daemon=True)
        proc.reader.start()
        self.procs[name] = proc
        return proc

    def campaigner(self, name: str, addr: str, mutant: bool = False) -> Proc:
        extra = ["--note", name, "--ttl-ms", str(self.ttl_ms)]
        if mutant:
            extra.append("--ignores-loss")
        proc = self.spawn(name, addr, extra)
        self.lining.append(name)
        return proc

    def observer(self) -> Proc:
        return self.spawn("O", self.addr, ["--observe"])

    # -- waiting

    def wait_for(self, ready: Callable[[], Any], what: str, seconds: float = PATIENCE_S) -> Any:
        deadline = time.monotonic() + seconds
        with self.cond:
            while True:
                found = ready()
                if found:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{what}: not within {seconds:g}s")
                self.cond.wait(min(left, 0.05))

    def elected(self, since: int, other_than: Optional[str] = None) -> Optional[Tuple[str, int]]:
        """The first campaigner (not `other_than`) elected after `since`, and its fence."""
        best: Optional[Tuple[int, str, int]] = None
        for name, proc in self.procs.items():
            if name == other_than or name == "O":
                continue
            for line in proc.lines:
                if line.get("event") == "elected" and line.get("t", 0) > since:
                    if best is None or line["t"] < best[0]:
                        best = (line["t"], name, line.get("fence", 0))
                    break
        return None if best is None else (best[1], best[2])

    def leader(self) -> Tuple[str, int]:
        """The campaigner elected last, and its fence."""
        last: Optional[Tuple[int, str, int]] = None
        for name, proc in self.procs.items():
            for line in proc.lines:
                if line.get("event") == "elected" and (last is None or line["t"] > last[0]):
                    last = (line["t"], name, line.get("fence", 0))
        if last is None:
            raise TimeoutError("nobody was elected")
        return last[1], last[2]

    def ready(self, name: str) -> bool:
        return any(line.get("event") == "ready" for line in self.procs[name].lines)

    def inspect(self) -> Dict[str, Any]:
        reply = fixture.command(self.addr, "INSPECT", LOCK, NAME)
        if isinstance(reply, list):
            return {_text(k): v for k, v in zip(reply[::2], reply[1::2])}
        return {}

    def settle(self) -> None:
        """Until the key is held by the campaigner elected last, every
        other campaigner expected waits in its line, and the observer saw
        the leader's fence."""
        deadline = time.monotonic() + PATIENCE_S
        while True:
            with self.cond:
                leader, fence = self.leader()
                seen = any(
                    line.get("event") == "observed" and line.get("fence") == fence
                    for line in self.procs["O"].lines
                )
            want = len([n for n in self.lining if n != leader])
            state = self.inspect()
            if seen and state.get("held") and int(state.get("waiters", -1)) == want:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the line did not settle: leader {leader} fence {fence}, observed {seen}, "
                    f"INSPECT {state}, want {want} waiters"
                )
            time.sleep(0.05)

    # -- faults

    def fault(self, what: str, victim: str, act: Callable[[], None]) -> Tuple[str, int]:
        t = time.monotonic_ns()
        act()
        self.faults.append((what, victim, t))
        found = self.wait_for(
            lambda: self.elected(t, other_than=victim),
            f"{what}: someone other than {victim} elected",
            self.ttl_ms / 1000 + PATIENCE_S,
        )
        name, fence = found
        say(f"{what}: {name} elected (fence {fence}) {(self._t(name, t) - t) / NS:.3f}s later")
        return name, fence

    def _t(self, name: str, since: int) -> int:
        for line in self.procs[name].lines:
            if line.get("event") == "elected" and line["t"] > since:
                return int(line["t"])
        return since

    def run(self) -> None:
        assert self.proxy is not None
        self.campaigner("A", self.proxy.addr, mutant=self.mutant)
        self.wait_for(lambda: self.elected(0), "A elected")
        self.campaigner("B", self.addr)
        self.campaigner("C", self.addr)
        self.observer()
        self.wait_for(lambda: all(self.ready(n) for n in "BCO"), "B, C and the observer ready")
        self.settle()

        # (a) A cut off: the proxy frozen while it leads.
        proxy = self.proxy.proc
        leader, _ = self.leader()
        self.fault(
            f"(a) proxy frozen while {leader} leads",
            leader,
            lambda: proxy.send_signal(signal.SIGSTOP),
        )
        proxy.send_signal(signal.SIGCONT)
        if self.mutant:
            self.lining.remove("A")  # it believes it leads, forever
        self.settle()

        # (b) the leader stopped.
        leader, _ = self.leader()
        stopped = self.procs[leader]
        self.fault(f"(b) {leader} SIGSTOPped", leader, lambda: stopped.signal(signal.SIGSTOP))
        stopped.signal(signal.SIGCONT)
        self.settle()

        # (c) the leader killed, and a fresh campaigner in its place.
        leader, _ = self.leader()
        killed = self.procs[leader]
        killed.killed = True
        self.fault(f"(c) {leader} SIGKILLed", leader, lambda: killed.signal(signal.SIGKILL))
        self.lining.remove(leader)
        self.campaigner("D", self.addr)
        self.wait_for(lambda: self.ready("D"), "D ready")
        self.settle()
        time.sleep(OBSERVED_WITHIN_NS / NS)

    def close(self) -> int:
        """Stops everything; answers the time the observer was stopped."""
        for proc in self.procs.values():
            proc.killed = proc.killed or proc.popen.poll() is None
            proc.signal(signal.SIGCONT)
            proc.signal(signal.SIGKILL)
        stopped = time.monotonic_ns()
        for proc in self.procs.values():
            try:
                proc.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if proc.reader is not None:
                proc.reader.join(timeout=5)
        if self.proxy is not None:
            self.proxy.proc.send_signal(signal.SIGCONT)
            self.proxy.proc.kill()
            self.proxy.proc.wait(timeout=10)
        if self.server is not None:
            self.server.kill()
            self.server.wait(timeout=10)
        return stopped


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# ---------------------------------------------------------------- the rules


@dataclass
class Belief:
    who: str
    fence: int
    start: int
    end: int


@dataclass
class Verdict(Checked):
    beliefs: List[Belief] = field(default_factory=list)
    errors: int = 0

    def summary(self) -> str:
        fences = " ".join(f"{b.who}:{b.fence}" for b in self.beliefs)
        head = f"{len(self.beliefs)} leaderships ({fences}), {self.errors} campaign errors"
        return self.said(head, 12)


def _s(t: int, t0: int) -> str:
    return f"{(t - t0) / NS:.3f}s"


def beliefs_of(name: str, lines: List[Dict[str, Any]]) -> List[Belief]:
    out: List[Belief] = []
    current: Optional[Belief] = None
    for line in lines:
        event = line.get("event")
        if event == "elected":
            current = Belief(name, int(line["fence"]), int(line["t"]), int(line["t"]))
            out.append(current)
        elif event == "leading" and current is not None and line.get("fence") == current.fence:
            current.end = max(current.end, int(line["t"]))
        elif event == "lost":
            current = None
    return out


def register_refusals(procs: Dict[str, List[Dict[str, Any]]], t0: int) -> List[str]:
    """The register outside the system: every `elected` and `leading` line
    is a write of its fence, in CLOCK_MONOTONIC order across the processes;
    a write below the highest fence written so far is refused, and each
    refusal is a leader that acted on a term already over."""
    writes = sorted(
        (int(x["t"]), int(x["fence"]), name)
        for name, lines in procs.items()
        if name != "O"
        for x in lines
        if x.get("event") in ("elected", "leading") and isinstance(x.get("fence"), int)
    )
    refused: List[str] = []
    highest, by = -1, ""
    for t, fence, name in writes:
        if fence < highest:
            refused.append(
                f"register: {name} wrote fence {fence} at {_s(t, t0)}, below fence "
                f"{highest} that {by} wrote before: refused"
            )
        elif fence > highest:
            highest, by = fence, name
    return refused


def judge(
    procs: Dict[str, List[Dict[str, Any]]],
    bad: Dict[str, List[str]],
    exits: Dict[str, Optional[int]],
    faults: List[Tuple[str, str, int]],
    ttl_ms: int,
    stopped: int,
    t0: int,
) -> Verdict:
    """Judges the lines of every process (`procs`: name -> lines; "O" the
    observer) by the module's rules."""
    v = Verdict()
    for name, lines in procs.items():
        for text in bad.get(name, []):
            v.violations.append(f"{name}: a line that is not a JSON object: {text[:120]!r}")
        if not lines or lines[0].get("event") != "ready":
            v.violations.append(f"{name}: did not say ready first")
        for line in lines:
            event = line.get("event")
            if event not in EVENTS or not isinstance(line.get("t"), int):
                v.violations.append(f"{name}: an unknown line {line!r}")
            elif event in ("elected", "leading", "lost") and not isinstance(line.get("fence"), int):
                v.violations.append(f"{name}: {event} without a fence: {line!r}")
            elif event == "error":
                v.errors += 1
        if exits.get(name) is not None:
            v.violations.append(f"{name}: exited by itself, status {exits[name]}")
    # One leader at a time; fences rise.
    for name, lines in procs.items():
        if name != "O":
            v.beliefs.extend(beliefs_of(name, [x for x in lines if x.get("event") in EVENTS]))
    v.beliefs.sort(key=lambda b: b.start)
    latest: Optional[Belief] = None
    for b in v.beliefs:
        if latest is not None and b.start <= latest.end:
            v.violations.append(
                f"overlap: {b.who} believed it led from {_s(b.start, t0)} (fence {b.fence}) "
                f"while {latest.who} believed it led until {_s(latest.end, t0)} "
                f"(fence {latest.fence})"
            )
        if latest is None or b.end > latest.end:
            latest = b
    for a, b in zip(v.beliefs, v.beliefs[1:]):
        if b.fence <= a.fence:
            v.violations.append(
                f"fences: {b.who}'s fence {b.fence} (from {_s(b.start, t0)}) came after "
                f"{a.who}'s fence {a.fence}"
            )
    v.violations.extend(register_refusals(procs, t0))
    # Elected again in time.
    bound = ttl_ms * MS + REELECTED_SLACK_NS
    for what, victim, t in faults:
        after = [b for b in v.beliefs if b.who != victim and b.start > t]
        first = min((b.start for b in after), default=None)
        if first is None:
            v.violations.append(f"{what}: nobody else was elected")
        elif first - t > bound:
            v.violations.append(
                f"{what}: the next leader was elected {(first - t) / NS:.3f}s later, "
                f"past ttl + 1s ({bound / NS:.3f}s)"
            )
    # Observers are told.
    observed = [x for x in procs.get("O", []) if x.get("event") == "observed"]
    for b in v.beliefs:
        if b.start + OBSERVED_WITHIN_NS > stopped:
            continue  # elected too late to tell before the end
        seen = [x["t"] for x in observed if x.get("fence") == b.fence]
        if not seen:
            v.violations.append(f"observer: fence {b.fence} ({b.who}) was never observed")
        elif min(seen) > b.start + OBSERVED_WITHIN_NS:
            v.violations.append(
                f"observer: fence {b.fence} ({b.who}) observed {(min(seen) - b.start) / NS:.3f}s "
                "after its election, past 1s"
            )
    highest = -1
    for x in observed:
        fence = x.get("fence")
        if fence is None:
            continue
        if not isinstance(fence, int) or fence < highest:
            v.violations.append(f"observer: fence {fence} observed after fence {highest}")
        else:
            highest = fence
    return v


# ---------------------------------------------------------------- running


def run_once(args: argparse.Namespace, mutant: bool) -> Tuple[int, Verdict]:
    keep = Path(args.keep) if args.keep else None
    if keep is not None:
        dir = keep / ("mutant" if mutant else "plain")
        dir.mkdir(parents=True, exist_ok=True)
        cleanup = None
    else:
        cleanup = tempfile.TemporaryDirectory(prefix="holdline-election-")
        dir = Path(cleanup.name)
    world = World(args, dir, mutant)
    t0 = time.monotonic_ns()
    started = time.monotonic()
    failure = ""
    try:
        try:
            world.start_server()
            world.run()
        except (SetupError, FileNotFoundError) as e:
            say(f"could not set the run up: {e}")
            _tails(world)
            return 2, Verdict()
        except (TimeoutError, OSError) as e:
            failure = f"the scenario did not finish: {e}"
    finally:
        stopped = world.close()
    procs = {name: p.lines for name, p in world.procs.items()}
    bad = {name: p.bad for name, p in world.procs.items()}
    exits = {name: (None if p.killed else p.popen.returncode) for name, p in world.procs.items()}
    if keep is not None:
        for name, lines in procs.items():
            with open(dir / f"{name}.jsonl", "w") as f:
                f.writelines(json.dumps(line) + "\n" for line in lines)
        with open(dir / "faults.json", "w") as f:
            json.dump(world.faults, f)
    v = judge(procs, bad, exits, world.faults, world.ttl_ms, stopped, t0)
    if failure:
        v.violations.insert(0, failure)
    label = "with the mutant" if mutant else args.campaigner
    say(f"{label}: {time.monotonic() - started:.1f}s; {v.summary()}")
    if not v.ok:
        _tails(world)
    if cleanup is not None:
        cleanup.cleanup()
    return (0 if v.ok else 1), v


def _tails(world: World) -> None:
    for name, proc in world.procs.items():
        tail = fixture._tail(proc.stderr, 8)
        if tail.strip():
            say(f"{name}'s stderr:\n{tail}")


def self_test(args: argparse.Namespace) -> int:
    args.campaigner = PYTHON_CAMPAIGNER
    code, _ = run_once(args, mutant=False)
    if code != 0:
        say("self-test: the Python campaigner did not pass")
        return 1
    code, v = run_once(args, mutant=True)
    if code != 1 or not any(x.startswith("overlap") for x in v.violations):
        say("self-test: the mutant was not caught (no overlap)")
        return 1
    say("self-test: the campaigner passes and the mutant is caught (an overlap)")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--campaigner", default=PYTHON_CAMPAIGNER)
    p.add_argument("--ttl-ms", type=int, default=2000)
    p.add_argument("--binary", default=None)
    p.add_argument("--keep", default="")
    p.add_argument("--with-mutant", action="store_true")
    p.add_argument("--self-test", action="store_true")
    args = p.parse_args()
    if args.self_test:
        return self_test(args)
    code, _ = run_once(args, mutant=args.with_mutant)
    return code


if __name__ == "__main__":
    sys.exit(main())
