"""What needs no server: durations, names, keys, error texts and kinds."""

import pytest

import holdline_client
from holdline_client._address import Address
from holdline_client._cluster import Router
from holdline_client._durations import to_ms
from holdline_client._errors import from_reply, show_key, text_for
from holdline_client._lock import key_text
from holdline_client._pool import Dial
from holdline_client._store import Store


def offline_store() -> Store:
    return Store(Router([Address("127.0.0.1", 1)], Dial(None, None, 1000, 0)))


@pytest.mark.parametrize(
    "value, ms",
    [
        ("10s", 10_000),
        ("2m", 120_000),
        ("500ms", 500),
        ("1h", 3_600_000),
        ("1.5s", 1_500),
        ("0.5ms", 1),  # rounded up: a positive duration never becomes 0
        (2, 2_000),
        (0.25, 250),
        (0, 0),
        ("0s", 0),
        ("1m30s", 90_000),
        ("1.5ms", 2),
    ],
)
def test_durations_in_holdlines_written_form(value: object, ms: int) -> None:
    assert to_ms(value, "wait") == ms  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad",
    ["10", "ten", "10 s", " 3s", "-1s", "1d", "", "s", -1, float("nan"), float("inf"), True, [1]],
)
def test_a_bad_duration_raises_at_once(bad: object) -> None:
    store = offline_store()
    with pytest.raises(holdline_client.Invalid) as caught:
        store.lock("invoices", ttl=bad)  # type: ignore[arg-type]
    assert caught.value.kind == "invalid"
    assert str(caught.value).startswith(
        "lock invoices: a ttl is a duration such as '10s', '2m' or '500ms', "
        "or a number of seconds, not "
    )
    assert str(caught.value).endswith(": invalid")
    lock = store.lock("invoices")
    with pytest.raises(holdline_client.Invalid) as caught:
        lock.hold("9", wait=bad)  # type: ignore[arg-type]
    assert str(caught.value).startswith('lock invoices: key "9": a wait is a duration')
    with pytest.raises(holdline_client.Invalid):
        store.lock("invoices", max_hold=bad)  # type: ignore[arg-type]


def test_a_bad_durations_text() -> None:
    with pytest.raises(holdline_client.Invalid) as caught:
        offline_store().lock("invoices", ttl="10 sec")
    assert str(caught.value) == (
        "lock invoices: a ttl is a duration such as '10s', '2m' or '500ms', "
        'or a number of seconds, not "10 sec": invalid'
    )


def test_zero_ttl_and_max_hold_are_invalid_with_the_cores_texts() -> None:
    store = offline_store()
    with pytest.raises(holdline_client.Invalid) as caught:
        store.lock("invoices", ttl=0)
    assert str(caught.value) == "lock invoices: a ttl is at least 1ms: invalid"
    with pytest.raises(holdline_client.Invalid) as caught:
        store.lock("invoices", max_hold="0ms")
    assert str(caught.value) == "lock invoices: a maxHold is at least 1ms: invalid"


def test_a_bad_lock_name_is_invalid_with_the_cores_text() -> None:
    store = offline_store()
    with pytest.raises(holdline_client.Invalid) as caught:
        store.lock("bad name")
    assert str(caught.value) == (
        'lock "bad name": a lock name is 1 to 128 ASCII letters, digits and "_-.:": invalid'
    )
    for bad in ["", "x" * 129, "é", "a/b"]:
        with pytest.raises(holdline_client.Invalid):
            store.lock(bad)
    store.lock("a-b_c.d:e" + "x" * 119)  # 128 bytes of the allowed kind


def test_keys_are_text_or_integers() -> None:
    assert key_text(9) == "9"
    assert key_text(-12) == "-12"
    assert key_text("9") == "9"
    for bad in [True, 1.5, None, b"9"]:
        with pytest.raises(TypeError):
            key_text(bad)  # type: ignore[arg-type]


def test_error_replies_become_their_kinds_with_the_text_unchanged() -> None:
    cases = {
        'INUSE lock invoices: key "9": held past the hold\'s wait: in use': holdline_client.InUse,
        'LOST lock invoices: key "m": the lease was lost: it was revoked at its maxHold': (
            holdline_client.Lost
        ),
        'LIMIT lock invoices: key "7": 10000 waiters already stand in line: limit': (
            holdline_client.Limit
        ),
        'INVALID lock invoices: key "7": hold inside a hold of the same key: invalid': (
            holdline_client.Invalid
        ),
        'CLOSED lock invoices: key "7": the store is closed: closed': holdline_client.Closed,
    }
    kinds = {
        holdline_client.InUse: "in use",
        holdline_client.Lost: "lost",
        holdline_client.Limit: "limit",
        holdline_client.Invalid: "invalid",
        holdline_client.Closed: "closed",
    }
    for reply, cls in cases.items():
        err = from_reply(reply)
        assert type(err) is cls
        assert isinstance(err, holdline_client.Error)
        assert str(err) == reply.split(" ", 1)[1]
        assert err.kind == kinds[cls]
    for other in ["ERR unknown command 'FOO'", "NOAUTH Authentication required."]:
        err = from_reply(other)
        assert type(err) is holdline_client.Invalid
        assert str(err) == other  # the whole line, first word kept
    assert isinstance(holdline_client.Invalid("x"), ValueError)


def test_keys_in_texts_are_shown_as_the_core_shows_them() -> None:
    assert show_key("9") == '"9"'
    assert show_key('a"b\\') == '"a\\"b\\\\"'
    assert show_key("a\x01\tb\u00e9") == '"a\\u{1}\\tb\u00e9"'
    assert show_key("x" * 64) == '"' + "x" * 64 + '"'
    assert show_key("x" * 65) == '"' + "x" * 64 + '..."'
    assert text_for("l", "m", "its store closed", "lost") == (
        'lock l: key "m": the lease was lost: its store closed'
    )
    assert text_for(None, None, "the store is closed", "closed") == (
        "store: the store is closed: closed"
    )
