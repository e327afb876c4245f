"""The part of GJSON path syntax (github.com/tidwall/gjson, SYNTAX.md) that
KEDA's metrics-api trigger reads with and docs/autoscaling.md uses: keys
separated by dots, array indices, and `#(key=="value")`, the first element of
an array whose key equals the value. Anything else is refused, so a path the
docs write in a form this does not read fails the test rather than passing."""

from __future__ import annotations

import json
import re
from typing import Any

_QUERY = re.compile(r'#\((\w+)==("(?:[^"\\]|\\.)*")\)')


def get(document: Any, path: str) -> Any:
    value = document
    for part in _parts(path):
        query = _QUERY.fullmatch(part)
        if query is not None:
            if not isinstance(value, list):
                raise KeyError(f"{part}: not an array")
            key, wanted = query.group(1), json.loads(query.group(2))
            value = next(v for v in value if isinstance(v, dict) and v.get(key) == wanted)
        elif isinstance(value, list) and part.isdigit():
            value = value[int(part)]
        elif isinstance(value, dict) and re.fullmatch(r"\w+", part):
            value = value[part]
        else:
            raise KeyError(f'{part!r} of {path!r}: not a key, index or #(key=="value")')
    return value


def _parts(path: str) -> list[str]:
    """Split at the dots that are not inside a #(...) query."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(path):
        depth += char == "("
        depth -= char == ")"
        if char == "." and depth == 0:
            parts.append(path[start:i])
            start = i + 1
    parts.append(path[start:])
    return parts
