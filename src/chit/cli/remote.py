"""`chit submit --url URL`, `chit wait --url URL`, the flow control commands
(`chit limits`, `pause`, `resume`) and `chit schedules` with `--url`: the same
commands through the HTTP API (`chit.Client`) instead of the database, with the
same output and exit codes (0 succeeded, 1 failed, cancelled or timed out).
Errors the server answers are raised as the matching chit exceptions, so the
CLI's error handling (exit 2 for bad input or an unknown job, 3 when the API or
its database is unreachable) applies unchanged."""

from __future__ import annotations

import sys
from dataclasses import fields
from typing import Any

from chit.api.schemas.jobs import JobStatus
from chit.api.schemas.limits import LimitOut, LimitValues
from chit.api.schemas.schedules import ScheduleOut
from chit.cli import output
from chit.cli.progress import WaitDisplay
from chit.client import APINotFound, Client
from chit.limits import KindLimits, Limits, Paused
from chit.requests import JobRequest
from chit.schedules import Rule, StoredSchedule, check_catch_up


def submit_remote(
    url: str,
    api_key: str | None,
    request: JobRequest,
    *,
    wait: bool = False,
    wait_timeout: float | None = None,
    as_json: bool = False,
) -> int:
    with Client(url, api_key) as client:
        submitted = client.submit(**submit_options(request))
        if not wait:
            if as_json:
                output.print_json(
                    {
                        "job_id": submitted.job_id,
                        "created": submitted.created,
                        "debounced": submitted.debounced,
                    }
                )
            else:
                print(
                    output.submitted_line(submitted.job_id, submitted.created, submitted.debounced)
                )
            return 0
        if not as_json:
            print(submitted.job_id, file=sys.stderr)
        return _wait(client, submitted.job_id, wait_timeout, as_json)


def submit_options(request: JobRequest) -> dict[str, Any]:
    """`Client.submit`'s arguments for a request: every option but the tenant,
    which is the API key's (the CLI sends no trace context)."""
    options = {
        f.name: getattr(request, f.name)
        for f in fields(JobRequest)
        if f.name not in ("tenant", "traceparent")
    }
    if not request.depends_on:  # neither sent: the server's defaults
        options |= {"depends_on": None, "run_on": None}
    return options


def workflow_remote(url: str, api_key: str | None, workflow_id: str) -> list[output.WorkflowRow]:
    """`chit workflow ID --url URL`: the rows `chit workflow` prints."""
    with Client(url, api_key) as client:
        view = client.get_workflow(workflow_id)
    return [
        output.WorkflowRow(j.id, j.ref, j.kind, j.state.value, j.depends_on, j.run_on)
        for j in view.jobs
    ]


def wait_remote(
    url: str,
    api_key: str | None,
    job_id: str,
    *,
    timeout: float | None = None,
    as_json: bool = False,
) -> int:
    with Client(url, api_key) as client:
        return _wait(client, job_id, timeout, as_json)


def _wait(client: Client, job_id: str, timeout: float | None, as_json: bool) -> int:
    display = WaitDisplay(as_json)

    def show(status: JobStatus) -> None:
        display.update(status.state, status.progress.done, status.progress.total)

    try:
        status = client.wait(job_id, timeout=timeout, on_update=show)
    except TimeoutError:
        return display.timed_out(timeout)
    return display.finished(
        status.state, status.result, status.error, status.model_dump(mode="json")
    )


class RemoteFlow:
    """The store's flow control calls that the CLI makes (`limits`, `pauses`,
    `set_limits`, `clear_limits`, `pause`, `resume`), through the HTTP API: the
    commands run unchanged on either. The server checks every value again."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def limits(self) -> list[KindLimits]:
        return [_kind_limits(k) for k in self.client.limits().limits]

    def pauses(self) -> list[Paused]:
        return [Paused(p.queue, p.kind, p.paused_at) for p in self.client.limits().paused]

    def set_limits(self, kind: str, limits: Limits) -> KindLimits:
        return _kind_limits(self.client.set_limits(kind, **limits.as_dict()))

    def clear_limits(self, kind: str) -> bool:
        return self.client.clear_limits(kind)

    def pause(self, queue: str | None = None, kind: str | None = None) -> bool:
        return self.client.pause(queue, kind=kind)

    def resume(self, queue: str | None = None, kind: str | None = None) -> bool:
        return self.client.resume(queue, kind=kind)


def _kind_limits(entry: LimitOut) -> KindLimits:
    return KindLimits(
        entry.kind,
        declared=_limits(entry.declared),
        override=_limits(entry.override),
        running=entry.running,
        waiting=entry.waiting,
        updated_at=entry.updated_at,
    )


def _limits(values: LimitValues) -> Limits:
    return Limits.checked(**values.model_dump())


class RemoteSchedules:
    """The schedule calls `chit schedules` makes (chit.cli.schedules.Schedules),
    through the HTTP API. An unknown name answers as the store does (None,
    False), so the command says what it says on the database; the server checks
    what is added, with its app."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def list_schedules(self) -> list[StoredSchedule]:
        return [_stored(s) for s in self.client.schedules().schedules]

    def get_schedule(self, name: str) -> StoredSchedule | None:
        try:
            return _stored(self.client.get_schedule(name))
        except APINotFound as e:
            _raise_unless_unknown(e)
            return None

    def add_schedule(
        self,
        name: str,
        kind: str,
        payload: Any,
        *,
        cron: str | None,
        every: str | int | None,
        tz: str,
        catch_up: str,
    ) -> StoredSchedule:
        put = self.client.put_schedule(
            name, kind, payload, cron=cron, every=every, tz=tz, catch_up=catch_up
        )
        return _stored(put)

    def pause_schedule(self, name: str, paused: bool) -> StoredSchedule | None:
        act = self.client.pause_schedule if paused else self.client.resume_schedule
        try:
            return _stored(act(name))
        except APINotFound as e:
            _raise_unless_unknown(e)
            return None

    def remove_schedule(self, name: str) -> bool:
        try:
            return self.client.remove_schedule(name).removed
        except APINotFound as e:
            _raise_unless_unknown(e)
            return False


def _raise_unless_unknown(error: APINotFound) -> None:
    """The server's 404 for a schedule it does not have is the store's None;
    another 404 (a URL that is no chit API, say) is an error."""
    if error.code != "schedule_not_found":
        raise error


def _stored(s: ScheduleOut) -> StoredSchedule:
    return StoredSchedule(
        name=s.name,
        kind=s.kind,
        payload=s.payload,
        rule=Rule(cron=s.cron, every=s.every, tz=s.tz),
        catch_up=check_catch_up(s.catch_up),
        paused=s.paused,
        next_at=s.next_at,
        last_slot=s.last_slot,
        last_job_id=s.last_job_id,
        last_job_state=None if s.last_job_state is None else s.last_job_state.value,
        source=s.source,
        created_at=s.created_at,
        updated_at=s.updated_at,
    )
