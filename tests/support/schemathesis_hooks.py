"""Schemathesis hooks for tests/api/test_api_schemathesis_cli.py (loaded with
SCHEMATHESIS_HOOKS), for what a request's shape cannot say and the API
rightly refuses with 422 by the state of the database, which the check of
schema-valid requests would count against it:

- generated requests reuse Idempotency-Key values ("0" most of all) with
  other bodies (`idempotency_conflict`): a key already used with another body
  is made unique;
- `depends_on` names generated job ids, which exist nowhere (`no such job`):
  a well-formed list is emptied.

Values the schema refuses are left as they are, to be refused."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import schemathesis

from chit import bounds

_counter = itertools.count()
_first_body: dict[tuple[str, str, str], str] = {}


@schemathesis.hook
def before_call(ctx: Any, case: Any, **kwargs: Any) -> None:
    if case.method.upper() == "POST" and isinstance(case.body, dict):
        _no_dependencies(case.body)
        for job in case.body.get("jobs") or ():
            if isinstance(job, dict):
                _no_dependencies(job)
    _unique_key(case)


def _no_dependencies(body: dict[str, Any]) -> None:
    names = body.get("depends_on")
    if isinstance(names, list) and all(
        isinstance(n, str) and 1 <= len(n) <= bounds.REF_MAX and bounds.is_plain_text(n)
        for n in names
    ):
        body["depends_on"] = []


def _unique_key(case: Any) -> None:
    headers = case.headers
    if not headers:
        return
    name = next((h for h in headers if h.lower() == "idempotency-key"), None)
    if name is None:
        return
    key = headers[name]
    if not isinstance(key, str) or not re.fullmatch(bounds.IDEMPOTENCY_KEY_PATTERN, key):
        return
    tenant = str((headers.get("Authorization") or "")[-24:])
    body = json.dumps(case.body, sort_keys=True, default=str)
    first = _first_body.setdefault((case.path, tenant, key), body)
    if first != body:
        unique = f"{key[:200]}~{next(_counter)}"
        headers[name] = unique
        _first_body[(case.path, tenant, unique)] = body
