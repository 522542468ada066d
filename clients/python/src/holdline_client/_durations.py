"""Durations as holdline writes them in every language (`"10s"`, `"2m"`,
`"500ms"`, also `"1h"`, `"1.5s"` and sums such as `"1m30s"`), or seconds as
numbers.

The server takes whole milliseconds; a duration that is not a whole number
of them is rounded up, so a positive duration never becomes zero (which
would mean "do not wait" for a wait, and is refused for a ttl).
"""

import json
import math
import re
from fractions import Fraction
from typing import Optional, Union

from ._errors import Invalid, text_for

Duration = Union[str, int, float]
"""`"10s"`, `"2m"`, `"500ms"`, `"1.5s"`, `"1h"`, or seconds as a number."""

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ms|s|m|h)")
_WHOLE = re.compile(r"(?:(?:\d+(?:\.\d+)?|\.\d+)(?:ms|s|m|h))+")

# The core caps durations at u64::MAX / 4 ms; nothing useful is longer than
# this (about 292 million years), and it keeps the number a RESP integer.
_MAX_MS = (1 << 62) - 1


def to_ms(value: Duration, what: str, lock: Optional[str] = None, key: Optional[str] = None) -> int:
    """`value` in whole milliseconds; `Invalid` when it is not a duration.

    `what` names it in the error text (`ttl`, `maxHold`, `wait`)."""
    if isinstance(value, bool):
        raise _bad(value, what, lock, key)
    if isinstance(value, (int, float)):
        seconds = float(value)
        if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
            raise _bad(value, what, lock, key)
        ms = math.ceil(seconds * 1000) if isinstance(value, float) else value * 1000
    elif isinstance(value, str):
        if _WHOLE.fullmatch(value) is None:
            raise _bad(value, what, lock, key)
        exact = Fraction(0)
        for number, unit in _PART.findall(value):
            exact += Fraction(number) * _UNIT_MS[unit]
        ms = math.ceil(exact)
    else:
        raise _bad(value, what, lock, key)
    if ms > _MAX_MS:
        raise _bad(value, what, lock, key)
    return int(ms)


def _bad(value: object, what: str, lock: Optional[str], key: Optional[str]) -> Invalid:
    shown = json.dumps(value) if isinstance(value, str) else repr(value)
    what = (
        f"a {what} is a duration such as '10s', '2m' or '500ms', "
        f"or a number of seconds, not {shown}"
    )
    return Invalid(text_for(lock, key, what, "invalid"))
