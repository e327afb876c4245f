"""Schemathesis hooks for tests/api/test_api_schemathesis_cli.py (loaded with
SCHEMATHESIS_HOOKS), for what a request's shape cannot say and the API
rightly refuses with 422 by the state of the database, which the check of
schema-valid requests would count against it:

- generated requests reuse Idempotency-Key values ("0" most of all) with
  other bodies (`idempotency_conflict`): a key already used with another body
  is made unique;
- `depends_on` names generated job ids, which exist nowhere (`no such job`):
  a well-formed list is emptied; a workflow left with no job that has a ref
  or dependencies (the schema's `contains`) gets a ref on a job that can take
  one, and a ref given twice in one workflow (`duplicate ref`) is made unique;
- `expires_at` must be in the future and after `run_at`, which depends on the
  clock: a well-formed time that is not is left out;
- a schedule's cron rule must parse, its time zone exist and its kind be a
  task of the server's app, which no schema says: a string there is replaced
  by one that does (a rule, "UTC", the app's `big` task), a positive `every`
  by a whole number of seconds.

- a payload's text may hold no NUL (PostgreSQL's text cannot), at any depth of
  a model-less task's payload, which no JSON schema can say: NULs are removed;
- a signal's data (POST /jobs/{job_id}/signals/{name}) holds no NUL either,
  for the same reason: NULs are removed;
- a debounce key debounces one kind (`held by job ... of kind`), which depends
  on what was sent before: each kind's keys are made its own.

Values the schema refuses are left as they are, to be refused."""

from __future__ import annotations

import itertools
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import schemathesis

from chit import bounds

_counter = itertools.count()
_first_body: dict[tuple[str, str, str], str] = {}


@schemathesis.hook
def before_call(ctx: Any, case: Any, **kwargs: Any) -> None:
    if case.method.upper() == "POST" and isinstance(case.body, dict):
        jobs = case.body.get("jobs")
        for job in [case.body, *(jobs if isinstance(jobs, list) else ())]:
            if isinstance(job, dict):
                _no_dependencies(job)
                _no_past_expiry(job)
                _no_nul_in_payload(job)
                _debounce_key_of_its_kind(job)
    signal = case.method.upper() == "POST" and case.path == "/jobs/{job_id}/signals/{name}"
    if signal and isinstance(case.body, dict):
        case.body = _no_nul(case.body)
    if case.path == "/workflows" and isinstance(case.body, dict):
        _a_real_workflow(case.body)
    schedule = case.method.upper() == "PUT" and case.path == "/schedules/{name}"
    if schedule and isinstance(case.body, dict):
        _a_real_schedule(case.body)
    _unique_key(case)


def _no_dependencies(body: dict[str, Any]) -> None:
    names = body.get("depends_on")
    if isinstance(names, list) and all(
        isinstance(n, str) and 1 <= len(n) <= bounds.REF_MAX and bounds.is_plain_text(n)
        for n in names
    ):
        body["depends_on"] = []


def _no_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [_no_nul(v) for v in value]
    if isinstance(value, dict):
        return {_no_nul(k): _no_nul(v) for k, v in value.items()}
    return value


def _no_nul_in_payload(body: dict[str, Any]) -> None:
    if isinstance(body.get("payload"), dict):
        body["payload"] = _no_nul(body["payload"])


def _debounce_key_of_its_kind(body: dict[str, Any]) -> None:
    key, kind = body.get("debounce_key"), body.get("kind")
    if isinstance(key, str) and isinstance(kind, str) and 1 <= len(key) <= 100:
        body["debounce_key"] = f"{key}~{kind}"[: bounds.NAME_MAX]


def _a_real_workflow(body: dict[str, Any]) -> None:
    jobs = body.get("jobs")
    if not isinstance(jobs, list):
        return
    jobs = [j for j in jobs if isinstance(j, dict)]
    seen: set[str] = set()
    for i, job in enumerate(jobs):
        ref = job.get("ref")
        if isinstance(ref, str) and ref in seen:
            job["ref"] = ref = f"{ref[: bounds.REF_MAX - 8]}~{i}"
        if isinstance(ref, str):
            seen.add(ref)
    if any(isinstance(j.get("ref"), str) or j.get("depends_on") for j in jobs):
        return
    for i, job in enumerate(jobs):
        if job.get("debounce_key") is None:  # a debounced job takes no ref
            job["ref"] = f"job-{i}"
            return


def _a_real_schedule(body: dict[str, Any]) -> None:
    for name, value in (("cron", "0 8 * * *"), ("tz", "UTC"), ("kind", "big")):
        if isinstance(body.get(name), str):
            body[name] = value
    every = body.get("every")
    if isinstance(every, str):
        body["every"] = "60s"
    elif isinstance(every, int | float) and not isinstance(every, bool):
        body["every"] = 60


def _no_past_expiry(body: dict[str, Any]) -> None:
    expires = _moment(body.get("expires_at"))
    if expires is None:
        return
    run_at = _moment(body.get("run_at"))
    soon = datetime.now(UTC) + timedelta(minutes=1)
    if expires <= soon or (run_at is not None and expires <= run_at):
        del body["expires_at"]


def _moment(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


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
