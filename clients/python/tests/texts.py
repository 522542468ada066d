"""The table of client-made texts (`clients/texts.json`), read as every
holdline client's tests read it, and a check that an error matches one.

Placeholders are filled with the values a test gives (`key` is shown as
the core shows keys: quoted); `{reason}`, the platform's own words, may
be any text.
"""

import json
import re
from pathlib import Path
from typing import Any, Dict

TABLE_PATH = Path(__file__).resolve().parents[2] / "texts.json"
TABLE: Dict[str, Any] = json.loads(TABLE_PATH.read_text(encoding="utf-8"))
TEXTS: Dict[str, str] = TABLE["texts"]
RULES: Dict[str, Any] = TABLE["rules"]

_PLACEHOLDER = re.compile(r"\{([a-z]+)\}")


def pattern(name: str, **values: str) -> "re.Pattern[str]":
    """The text `name` as a regular expression, placeholders filled in."""
    parts = []
    last = 0
    template = TEXTS[name]
    for match in _PLACEHOLDER.finditer(template):
        parts.append(re.escape(template[last : match.start()]))
        field = match.group(1)
        if field == "reason":
            parts.append(".+")
        else:
            assert field in values, f"text {name} needs {field}"
            parts.append(re.escape(values[field]))
        last = match.end()
    parts.append(re.escape(template[last:]))
    return re.compile("".join(parts), re.DOTALL)


def assert_text(error: BaseException, name: str, **values: str) -> None:
    """`str(error)` is the text `name` of the table, byte for byte."""
    got = str(error)
    assert pattern(name, **values).fullmatch(got), (
        f"{got!r} is not the table's {name}: {TEXTS[name]!r} with {values}"
    )
