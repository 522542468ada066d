"""The nemesis suite's checker: reads the clients' hold records (see
`nemesis_client.py`) and the nemesis's own log of client pauses, and says
what broke. Times are CLOCK_MONOTONIC nanoseconds, one clock for every
process of the machine.

The rules:
- **Exclusion.** No two clients believe they hold one key at one instant:
  a belief runs from a hold's `start` to its `ok_until`.
- **Fences.** Of the holds of a key that believed at all, taken in the
  order their beliefs began, fences rise.
- **No hang.** A hold is granted or fails within wait + ttl + a margin of
  being asked, unless its own process was paused meanwhile: the client
  gives up at wait + max(ttl, 1s) from the call whatever it is doing
  (texts.json's wait_grace), so the margin is only the machine's.
- **Documented errors only.** Every error is one of the client's kinds.
- **Back after the faults.** Once every fault healed, each key is granted
  again within etcd ttl + max ttl + a margin (the `final` records).
- **Planned hand-overs** (a rolling restart: each node in turn SIGTERM'd,
  then started again): the holds held when their key's node got SIGTERM
  are counted, and how many of them did not end `ok`. Only with
  `expect_handover` is a loss a violation (a hold held across a SIGTERM,
  or any hold begun in the rolling phase, that ended `lost`, its client
  not paused meanwhile): until the nodes hand leases over and the
  clients re-attach, such holds are lost, and the count says how many.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

NS = 1_000_000_000
DOCUMENTED = {"ok", "invalid", "in use", "lost", "limit", "closed"}


@dataclass
class Checked:
    """What a checker found (this suite's and the election checker's): the
    rules' violations, none when every rule held."""

    violations: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def said(self, head: str, most: int) -> str:
        """`head`, then no violation, or the first `most` violations and
        how many more."""
        if self.ok:
            return f"{head}: no violation"
        shown = "\n  ".join(self.violations[:most])
        more = len(self.violations) - most
        tail = f"\n  (+{more} more)" if more > 0 else ""
        return f"{head}: {len(self.violations)} violations\n  {shown}{tail}"


@dataclass
class Handover:
    """A node SIGTERM'd in a rolling restart: when (CLOCK_MONOTONIC ns),
    and the keys whose slots it served just before."""

    node: int
    at: int
    keys: List[str]


@dataclass
class Verdict(Checked):
    holds: int = 0
    believed: int = 0
    outcomes: Dict[str, int] = field(default_factory=dict)
    handovers: int = 0  # SIGTERMs of a rolling restart
    across: int = 0  # holds held when their node got SIGTERM
    across_lost: int = 0  # of those, ended other than ok
    phase_holds: int = 0  # holds begun in the rolling phase
    phase_lost: int = 0  # of those, ended lost

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.outcomes.items()))
        head = f"{self.holds} holds ({kinds}), {self.believed} believed"
        if self.handovers:
            head += (
                f"; rolling restart: {self.handovers} SIGTERMs, {self.across} holds held "
                f"across a planned hand-over, {self.across_lost} of them lost; "
                f"{self.phase_lost} of {self.phase_holds} holds begun in the phase lost"
            )
        return self.said(head, 10)


def read_records(paths: Iterable[Path]) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
    return out


def _seconds(ns: int) -> str:
    return f"{ns / NS:.3f}s"


def _beliefs(records: List[Dict[str, Any]]) -> Dict[str, List[Dict[str, Any]]]:
    by_key: Dict[str, List[Dict[str, Any]]] = {}
    for r in records:
        if r.get("start") is not None and r.get("ok_until") is not None:
            by_key.setdefault(r["key"], []).append(r)
    for beliefs in by_key.values():
        beliefs.sort(key=lambda r: r["start"])
    return by_key


def check_exclusion_and_fences(records: List[Dict[str, Any]], v: Verdict) -> None:
    for key, beliefs in _beliefs(records).items():
        v.believed += len(beliefs)
        latest: Optional[Dict[str, Any]] = None  # the belief reaching furthest
        for r in beliefs:
            if latest is not None and r["start"] <= latest["ok_until"]:
                v.violations.append(
                    f"key {key}: client {r['client']} believed from {_seconds(r['start'])} "
                    f"(fence {r['fence']}) while client {latest['client']} believed until "
                    f"{_seconds(latest['ok_until'])} (fence {latest['fence']})"
                )
            if latest is None or r["ok_until"] > latest["ok_until"]:
                latest = r
        for a, b in zip(beliefs, beliefs[1:], strict=False):
            if b["fence"] <= a["fence"]:
                v.violations.append(
                    f"key {key}: fence {b['fence']} (client {b['client']}) came after "
                    f"fence {a['fence']} (client {a['client']})"
                )


def _paused(pauses: List[Tuple[int, int, int]], client: int, since: int, until: int) -> bool:
    return any(c == client and s < until and e > since for c, s, e in pauses)


def check_liveness(
    records: List[Dict[str, Any]],
    pauses: List[Tuple[int, int, int]],
    bound_ns: int,
    v: Verdict,
) -> None:
    for r in records:
        v.holds += 1
        outcome = r["outcome"]
        v.outcomes[outcome] = v.outcomes.get(outcome, 0) + 1
        if outcome not in DOCUMENTED:
            v.violations.append(f"client {r['client']} key {r['key']}: {outcome}: {r.get('error')}")
        answered = r.get("start") or r["returned"]
        if answered - r["called"] > bound_ns and not _paused(
            pauses, r["client"], r["called"], answered
        ):
            v.violations.append(
                f"client {r['client']} key {r['key']}: answered after "
                f"{_seconds(answered - r['called'])}, past {_seconds(bound_ns)} ({outcome})"
            )


def check_recovery(finals: List[Dict[str, Any]], healed: int, bound_ns: int, v: Verdict) -> None:
    """Each key of the final pass granted within the bound; the final pass
    tries a key again after a documented failure, so only its grant counts."""
    granted = {r["key"] for r in finals if r["outcome"] == "ok"}
    keys = {r["key"] for r in finals}
    for r in finals:
        if r["outcome"] not in DOCUMENTED:
            v.violations.append(f"final key {r['key']}: {r['outcome']}: {r.get('error')}")
    for key in sorted(keys - granted):
        v.violations.append(f"key {key}: not granted again after the faults healed")
    for r in finals:
        if r["outcome"] == "ok" and r["start"] - healed > bound_ns:
            v.violations.append(
                f"key {r['key']}: granted {_seconds(r['start'] - healed)} after the faults "
                f"healed, past {_seconds(bound_ns)}"
            )


def check_handovers(
    records: List[Dict[str, Any]],
    handovers: List[Handover],
    phase: Tuple[int, int],
    pauses: List[Tuple[int, int, int]],
    expect_handover: bool,
    v: Verdict,
) -> None:
    """Counts the holds held across a planned hand-over (their `start` at
    or before their key's node's SIGTERM, their body's end at or after it)
    and those of them that ended other than `ok`; and the holds begun in
    the rolling phase (`phase`: its first SIGTERM to its end) and those
    that ended `lost`. With `expect_handover` each such loss, its client
    not paused meanwhile (its own ttl), is a violation. The phase has no
    other fault, so no cut link ends a hold there."""
    v.handovers = len(handovers)
    for r in records:
        start = r.get("start")
        end = r.get("end", r["returned"])
        excused = _paused(pauses, r["client"], r["called"], r["returned"])
        held_at = [
            h
            for h in handovers
            if start is not None and r["key"] in h.keys and start <= h.at <= end
        ]
        if held_at:
            v.across += 1
            if r["outcome"] != "ok":
                v.across_lost += 1
                if expect_handover and not excused:
                    v.violations.append(
                        f"client {r['client']} key {r['key']} (fence {r.get('fence')}): held "
                        f"when node {held_at[0].node} got SIGTERM at {_seconds(held_at[0].at)}, "
                        f"ended {r['outcome']}: {r.get('error')}"
                    )
        if phase[0] <= r["called"] <= phase[1]:
            v.phase_holds += 1
            if r["outcome"] == "lost":
                v.phase_lost += 1
                if expect_handover and not excused and not held_at:
                    v.violations.append(
                        f"client {r['client']} key {r['key']}: begun in the rolling phase at "
                        f"{_seconds(r['called'])}, ended lost: {r.get('error')}"
                    )


def check(
    records: List[Dict[str, Any]],
    finals: List[Dict[str, Any]],
    pauses: List[Tuple[int, int, int]],
    hold_bound_ns: int,
    healed: int,
    recovery_bound_ns: int,
    handovers: Optional[List[Handover]] = None,
    phase: Tuple[int, int] = (0, -1),
    expect_handover: bool = False,
) -> Verdict:
    v = Verdict()
    everything = records + finals
    check_exclusion_and_fences(everything, v)
    check_liveness(records, pauses, hold_bound_ns, v)
    check_recovery(finals, healed, recovery_bound_ns, v)
    if handovers:
        check_handovers(records, handovers, phase, pauses, expect_handover, v)
    return v
