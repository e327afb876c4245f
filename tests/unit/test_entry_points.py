"""Every way into chit takes the same options (issue 23): a job's are
`chit.JobRequest`'s fields, a limit's are `chit.limits.Limits`'. Each entry
point takes every field, but those listed in NOT_TAKEN with the reason; a
field added to JobRequest or Limits fails here until each entry point takes it
or says why not. (The dashboard submits no jobs and sets no limits: it shows
them, from `fields(Limits)`.)"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from chit import JobRequest, Queue
from chit.api.schemas.jobs import SubmitJob
from chit.api.schemas.limits import LimitOut, LimitValues, SetLimits
from chit.cli.main import build_parser
from chit.cli.submitting import job_request, submit_options
from chit.client import AsyncClient, Client
from chit.dashboard import flow as dashboard_flow
from chit.limits import Limits

REQUEST_FIELDS = {f.name for f in dataclasses.fields(JobRequest)}
LIMIT_FIELDS = [f.name for f in dataclasses.fields(Limits)]

_CURRENT_SPAN = "the current span's (chit.tracing); a caller's own goes in a JobRequest"
_API_KEY_TENANT = "the tenant is the API key's"
_HEADER = "an HTTP header, not a field: OpenTelemetry's httpx instrumentation sends it"

# The fields an entry point deliberately does not take, and why.
NOT_TAKEN: dict[str, dict[str, str]] = {
    "Queue.enqueue": {"traceparent": _CURRENT_SPAN},
    "Queue.aenqueue": {"traceparent": _CURRENT_SPAN},
    "Client.submit": {"tenant": _API_KEY_TENANT, "traceparent": _HEADER},
    "AsyncClient.submit": {"tenant": _API_KEY_TENANT, "traceparent": _HEADER},
    "POST /jobs": {
        "tenant": _API_KEY_TENANT,
        "idempotency_key": "the Idempotency-Key header",
        "traceparent": "the traceparent header (W3C Trace Context)",
    },
    "chit submit": {
        "tenant": "on the database the CLI is the operator, whose jobs have no tenant; "
        "with --url, the API key's",
        "traceparent": "the CLI runs in no trace",
        "expires_at": "--expires-in says it, as a duration from now",
    },
}

# `chit submit`: the flags that set each field, with a value other than its default.
SUBMIT_FLAGS: dict[str, list[str]] = {
    "idempotency_key": ["--idempotency-key", "k-1"],
    "run_at": ["--run-at", "2030-01-01T00:00:00+00:00"],
    "priority": ["--priority", "3"],
    "queue": ["--queue", "reports"],
    "max_attempts": ["--max-attempts", "4"],
    "concurrency_key": ["--concurrency-key", "customer-1"],
    "timeout": ["--timeout", "90s"],
    "ref": ["--ref", "report"],
    "depends_on": ["--depends-on", "01jbz4m5n8x9y0z1a2b3c4d5e6"],
    "run_on": ["--run-on", "finished"],
    "expires_in": ["--expires-in", "5m"],
    "unique_key": ["--unique-key", "u-1"],
    "debounce_key": ["--debounce-key", "d-1"],
    "debounce": ["--debounce", "5s"],
    "debounce_max": ["--debounce-max", "1m"],
    "cost": ["--cost", "250"],
}
# Its flags that are no job option: where the job goes, and waiting for it.
SUBMIT_OTHER_FLAGS = {"delay", "wait", "wait_timeout", "url", "api_key"}


def parameters(fn: Callable[..., Any]) -> set[str]:
    return set(inspect.signature(fn).parameters) - {"self", "connection"}


def chit_submit_takes() -> set[str]:
    """The fields `chit submit` sets, locally and with --url (both build the
    job with `job_request`), from every flag given at once."""
    argv = ["submit", "report", '{"region": "emea"}']
    for flags in SUBMIT_FLAGS.values():
        argv += flags
    request = job_request(build_parser().parse_args(argv))
    defaults = JobRequest("report")
    taken = {"kind", "payload"}
    for name in SUBMIT_FLAGS:
        assert getattr(request, name) != getattr(defaults, name), f"{name} not set"
        taken.add(name)
    return taken


ENTRY_POINTS: dict[str, Callable[[], set[str]]] = {
    "Queue.enqueue": lambda: parameters(Queue.enqueue),
    "Queue.aenqueue": lambda: parameters(Queue.aenqueue),
    "Client.submit": lambda: parameters(Client.submit),
    "AsyncClient.submit": lambda: parameters(AsyncClient.submit),
    "POST /jobs": lambda: set(SubmitJob.model_fields),
    "chit submit": chit_submit_takes,
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_each_entry_point_takes_every_field_of_a_job_request(entry: str) -> None:
    taken = ENTRY_POINTS[entry]()
    not_taken = set(NOT_TAKEN[entry])
    assert taken - REQUEST_FIELDS == set(), f"{entry} takes options JobRequest has not"
    missing = REQUEST_FIELDS - taken - not_taken
    assert not missing, f"{entry} does not take {sorted(missing)}: take them or say why not"
    assert not taken & not_taken, f"{entry} takes {sorted(taken & not_taken)}: not in NOT_TAKEN"


def test_chit_submit_has_a_flag_for_each_option_and_no_other() -> None:
    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    common = {a.dest for a in sub.choices["status"]._actions}  # the flags every command has
    flags = {a.dest for a in sub.choices["submit"]._actions} - common - {"kind", "payload"}
    assert flags == set(SUBMIT_FLAGS) | SUBMIT_OTHER_FLAGS


def test_chit_submit_url_hands_the_client_every_option_it_takes() -> None:
    argv = ["submit", "report", "{}", *(flag for f in SUBMIT_FLAGS.values() for flag in f)]
    request = job_request(build_parser().parse_args(argv))
    options = submit_options(request)
    assert set(options) == parameters(Client.submit)
    assert options == {name: getattr(request, name) for name in options}


def test_chit_submit_url_leaves_the_dependency_defaults_to_the_server() -> None:
    options = submit_options(JobRequest("report", {}))
    assert (options["depends_on"], options["run_on"]) == (None, None)


LIMIT_ENTRY_POINTS: dict[str, Callable[[], list[str]]] = {
    "Limits.checked": lambda: limit_parameters(Limits.checked),
    "@queue.task": lambda: [p for p in limit_parameters(Queue.task) if p in LIMITS],
    "PUT /limits/{kind} (SetLimits)": lambda: list(SetLimits.model_fields),
    "GET /limits (LimitValues)": lambda: list(LimitValues.model_fields),
    "GET /limits (LimitOut)": lambda: [f for f in LimitOut.model_fields if f in LIMITS],
    "Client.set_limits": lambda: limit_parameters(Client.set_limits),
    "AsyncClient.set_limits": lambda: limit_parameters(AsyncClient.set_limits),
    "chit limits set": lambda: [d.removeprefix("limit_") for d in limits_set_flags()],
    "the dashboard's labels": lambda: list(dashboard_flow.LABELS),
}
LIMITS = set(LIMIT_FIELDS)


def limit_parameters(fn: Callable[..., Any]) -> list[str]:
    """In order: the one list is in Limits' order everywhere."""
    return [p for p in inspect.signature(fn).parameters if p not in ("self", "kind")]


def limits_set_flags() -> list[str]:
    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    [actions] = [
        a for a in sub.choices["limits"]._actions if isinstance(a, argparse._SubParsersAction)
    ]
    # Not dest "concurrency": that is the worker's flag (cli/main.py).
    return [a.dest for a in actions.choices["set"]._actions if a.dest.startswith("limit_")]


@pytest.mark.parametrize("entry", sorted(LIMIT_ENTRY_POINTS))
def test_each_entry_point_takes_every_limit(entry: str) -> None:
    assert LIMIT_ENTRY_POINTS[entry]() == LIMIT_FIELDS
