"""What every store can hold: JSON without NaN, NUL characters or lone surrogates."""

from __future__ import annotations

import json
import re
from typing import Any

# A JSON \u0000 escape, not a literal backslash followed by "u0000".
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# One encoder for every call: json.dumps with options builds a new one each time.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)


def canonical(value: Any) -> str:
    """Sorted keys, no spaces, no NaN, ASCII only (so its length is its size in
    bytes): the form payloads are compared and sized in."""
    return _CANONICAL.encode(value)


def has_nul(encoded: str) -> bool:
    """True when JSON text holds a NUL character, which PostgreSQL's jsonb cannot."""
    # The plain substring test clears almost every payload without the regex.
    return "\\u0000" in encoded and _NUL_ESCAPE.search(encoded) is not None


def storable_json_error(value: Any) -> str | None:
    """Why `value` cannot be stored as JSON on every backend, or None if it can."""
    if value is None or type(value) in (bool, int):  # what most handlers return
        return None
    try:
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=False)
        encoded.encode()
    except (TypeError, ValueError, RecursionError) as e:
        return f"{type(e).__name__}: {e}"
    if has_nul(encoded):
        return "contains a NUL character (\\u0000)"
    return None


def storable_text(text: str) -> str:
    """Text any backend stores: lone surrogates and NUL replaced."""
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")


def one_line(value: Any, width: int) -> str:
    """A JSON value on one line, cut to `width` characters (for tables)."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "\u2026"
