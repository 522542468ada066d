"""The nemesis suite's checker (clients/testing/nemesis_check.py) on hold
records made up to break each rule, and shown to bite for real: the
clients' mutant that never looks at its lease, paused while it holds,
must fail a short nemesis run (clients/testing/nemesis.py)."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import nemesis_check
import pytest
from conftest import server_binary

NEMESIS = Path(__file__).resolve().parents[2] / "testing" / "nemesis.py"
S = 1_000_000_000


def hold(
    client: int,
    key: str,
    fence: int,
    start: float,
    ok_until: Optional[float],
    outcome: str = "ok",
    called: Optional[float] = None,
) -> Dict[str, Any]:
    """A hold record, times in seconds."""
    return {
        "client": client,
        "key": key,
        "fence": fence,
        "called": int((start if called is None else called) * S),
        "start": int(start * S),
        "ok_until": None if ok_until is None else int(ok_until * S),
        "end": int((ok_until or start) * S),
        "returned": int((ok_until or start) * S),
        "outcome": outcome,
    }


def verdict(records: List[Dict[str, Any]], finals: Optional[List[Dict[str, Any]]] = None) -> Any:
    return nemesis_check.check(records, finals or [], [], 10 * S, 0, 100 * S)


def test_holds_in_turn_with_rising_fences_pass() -> None:
    v = verdict([hold(0, "k", 1, 1.0, 1.5), hold(1, "k", 2, 1.6, 2.0), hold(0, "j", 1, 1.2, 3)])
    assert v.ok, v.summary()
    assert v.believed == 3


def test_two_beliefs_at_one_instant_fail() -> None:
    v = verdict([hold(0, "k", 1, 1.0, 2.0), hold(1, "k", 2, 1.9, 2.5)])
    assert not v.ok
    assert (
        "client 1 believed from 1.900s (fence 2) while client 0 believed until 2.000s"
        in (v.violations[0])
    )


def test_a_look_that_answered_lost_ends_the_belief() -> None:
    # Client 0 held first, but its only look said lost: it never believed.
    v = verdict([hold(0, "k", 1, 1.0, None, outcome="lost"), hold(1, "k", 2, 1.2, 2.0)])
    assert v.ok, v.summary()


def test_fences_that_fall_fail() -> None:
    v = verdict([hold(0, "k", 5, 1.0, 1.5), hold(1, "k", 4, 2.0, 2.5)])
    assert v.violations == ["key k: fence 4 (client 1) came after fence 5 (client 0)"]


def test_an_undocumented_error_and_a_hang_fail() -> None:
    odd = hold(0, "k", 1, 20.0, None, outcome="undocumented", called=1.0)
    v = verdict([odd])
    assert any("undocumented" in text for text in v.violations)
    assert any("answered after 19.000s, past 10.000s" in text for text in v.violations)


def test_a_key_not_granted_again_after_the_faults_fails() -> None:
    finals = [hold(9, "k", 1, 50.0, 51.0), hold(9, "j", 0, 200.0, None, outcome="in use")]
    v = verdict([], finals)
    assert "key j: not granted again after the faults healed" in v.violations


def test_holds_across_a_sigterm_are_counted_and_fail_only_when_expected() -> None:
    records = [
        hold(0, "k", 1, 1.0, None, outcome="lost"),  # held at node 0's SIGTERM (2.0 s)
        hold(1, "k", 2, 2.5, 3.0),  # after it
        hold(2, "j", 1, 1.5, 2.5),  # held then, on another node's key: not counted
        hold(3, "k", 3, 3.5, None, outcome="lost", called=3.2),  # lost later in the phase
    ]
    records[0]["end"] = records[0]["returned"] = int(2.2 * S)
    handovers = [nemesis_check.Handover(0, int(2.0 * S), ["k"])]
    phase = (int(1.9 * S), int(5.0 * S))
    v = nemesis_check.check(records, [], [], 10 * S, 0, 100 * S, handovers, phase)
    assert v.ok, v.summary()
    assert (v.handovers, v.across, v.across_lost) == (1, 1, 1)
    assert (v.phase_holds, v.phase_lost) == (2, 1)
    assert "1 holds held across a planned hand-over, 1 of them lost" in v.summary()
    strict = nemesis_check.check(records, [], [], 10 * S, 0, 100 * S, handovers, phase, True)
    assert len(strict.violations) == 2, strict.summary()
    assert "held when node 0 got SIGTERM at 2.000s, ended lost" in strict.violations[0]
    assert "begun in the rolling phase at 3.200s, ended lost" in strict.violations[1]
    # A client paused meanwhile (its own ttl ended the hold) is excused.
    paused = nemesis_check.check(
        records, [], [(0, int(1.5 * S), int(2.1 * S))], 10 * S, 0, 100 * S, handovers, phase, True
    )
    assert len(paused.violations) == 1, paused.summary()


def test_the_mutant_that_never_looks_fails_the_nemesis() -> None:
    if not Path("/usr/bin/etcd").is_file():
        if os.environ.get("HOLDLINE_REQUIRE_TOOLS"):
            pytest.fail("no /usr/bin/etcd (Debian's etcd-server) for the nemesis")
        pytest.skip("no /usr/bin/etcd (apt-get install etcd-server)")
    run = subprocess.run(
        [sys.executable, str(NEMESIS), "--seconds", "12", "--faults", "client-stop",
         "--never-looks", "--expect-violation", "--binary", str(server_binary())],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "the checker caught it, as it must" in run.stdout
    assert "believed from" in run.stdout
