"""Durations as the seed writes them (`"10s"`, `"2m"`, `"500ms"`) or seconds.

The server takes whole milliseconds; a duration that is not a whole number
of them is rounded up, so a positive duration never becomes zero (which
would mean "do not wait" for a wait, and is refused for a ttl).
"""

import math
import re
from typing import Optional, Union

from ._errors import Invalid, text_for

Duration = Union[str, int, float]
"""`"10s"`, `"2m"`, `"500ms"`, `"1.5s"`, `"1h"`, or seconds as a number."""

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
_PATTERN = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ms|s|m|h)")

# The core caps durations at u64::MAX / 4 ms; nothing useful is longer than
# this (about 292 million years), and it keeps the number a RESP integer.
_MAX_MS = (1 << 62) - 1


def to_ms(value: Duration, what: str, lock: Optional[str] = None) -> int:
    """`value` in whole milliseconds; `Invalid` when it is not a duration.

    `what` names it in the error text (`ttl`, `maxHold`, `wait`)."""
    if isinstance(value, bool):
        raise _bad(value, what, lock)
    if isinstance(value, (int, float)):
        seconds = float(value)
        if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
            raise _bad(value, what, lock)
        ms = math.ceil(seconds * 1000) if isinstance(value, float) else value * 1000
    elif isinstance(value, str):
        match = _PATTERN.fullmatch(value.strip())
        if match is None:
            raise _bad(value, what, lock)
        number, unit = match.groups()
        if "." in number:
            ms = math.ceil(float(number) * _UNIT_MS[unit])
        else:
            ms = int(number) * _UNIT_MS[unit]
    else:
        raise _bad(value, what, lock)
    if ms > _MAX_MS:
        raise _bad(value, what, lock)
    return int(ms)


def _bad(value: object, what: str, lock: Optional[str]) -> Invalid:
    return Invalid(
        text_for(
            lock,
            None,
            f'{what} {value!r} is not a duration (write "10s", "500ms", "2m", or seconds)',
            "invalid",
        )
    )


def show_ms(ms: int) -> str:
    """`10s`, `1500ms`, `2m`: the shortest exact form, as the core writes it."""
    if ms != 0 and ms % 60_000 == 0:
        return f"{ms // 60_000}m"
    if ms % 1000 == 0:
        return f"{ms // 1000}s"
    return f"{ms}ms"
