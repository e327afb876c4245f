"""What `JobContext.wait_for` and `wait_for_jobs` check and return, and the
checks `Queue.signal` shares with the HTTP API and the CLI (DESIGN.md "Long
AI tasks")."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from chit.bounds import (
    SIGNAL_DATA_BYTES,
    SIGNAL_NAME_MAX,
    WAIT_JOBS_MAX,
    WAIT_TIMEOUT_MAX,
    is_plain_text,
)
from chit.encoding import storable_json_error
from chit.errors import InvalidWait, JobFinished, JobNotFound
from chit.jobs import SignalStatus, State, WaitedJob
from chit.store.capabilities import Waits


class ResultReader(Protocol):
    def get_result(self, job_id: str, tenant: str | None = None) -> tuple[bool, Any]: ...


class Waited:
    """A job `wait_for_jobs` waited for: `.id`, `.kind`, `.state` (a
    `chit.State`), `.result` (a large one read from the store on first use)
    and `.error`."""

    __slots__ = ("_job", "_result", "_store")

    def __init__(self, job: WaitedJob, store: ResultReader) -> None:
        self._job = job
        self._store = store
        self._result: Any = job.result

    @property
    def id(self) -> str:
        return self._job.id

    @property
    def kind(self) -> str:
        return self._job.kind

    @property
    def state(self) -> State:
        return self._job.state

    @property
    def error(self) -> str | None:
        return self._job.error

    @property
    def result(self) -> Any:
        if self._job.result_external:
            _, self._result = self._store.get_result(self._job.id)
        return self._result

    def __repr__(self) -> str:
        return f"<Waited {self.kind} {self.id} {self.state.value}>"


def check_signal_name(name: Any) -> str:
    """A signal's name: text of 1 to SIGNAL_NAME_MAX characters, storable; else InvalidWait."""
    if not isinstance(name, str):
        raise InvalidWait(f"a signal name is text, not {type(name).__name__}")
    if not name:
        raise InvalidWait("a signal name must not be empty")
    if len(name) > SIGNAL_NAME_MAX:
        raise InvalidWait(
            f"signal name {name[:40]!r}... is {len(name)} characters; at most {SIGNAL_NAME_MAX}"
        )
    if not is_plain_text(name):
        raise InvalidWait(f"signal name {name!r} holds a control character or a lone surrogate")
    return name


def check_signal_data(data: Any) -> dict[str, Any]:
    """A signal's data: a JSON object (None: {}) of at most SIGNAL_DATA_BYTES."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidWait(f"a signal's data is a JSON object, not {type(data).__name__}")
    problem = storable_json_error(data)
    if problem is not None:
        raise InvalidWait(f"a signal's data is not JSON: {problem}")
    size = len(json.dumps(data, ensure_ascii=False).encode())
    if size > SIGNAL_DATA_BYTES:
        raise InvalidWait(f"a signal's data is {size:,} bytes; at most {SIGNAL_DATA_BYTES:,}")
    return data


def check_timeout(timeout: Any) -> float | None:
    """A wait's timeout: None, or seconds above 0 and at most WAIT_TIMEOUT_MAX."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise InvalidWait(f"a wait's timeout is a number of seconds, not {type(timeout).__name__}")
    seconds = float(timeout)
    if not math.isfinite(seconds) or not 0 < seconds <= WAIT_TIMEOUT_MAX:
        raise InvalidWait(
            f"a wait's timeout is above 0 and at most {WAIT_TIMEOUT_MAX:,} seconds, not {timeout!r}"
        )
    return seconds


def check_ids(ids: Any, own_id: str) -> tuple[str, ...]:
    """The ids `wait_for_jobs` was given: a non-empty sequence of job ids, not the job's own."""
    if isinstance(ids, str) or not isinstance(ids, Sequence):
        raise InvalidWait("wait_for_jobs takes a list of job ids")
    if not ids:
        raise InvalidWait("wait_for_jobs needs at least one job id")
    if len(ids) > WAIT_JOBS_MAX:
        raise InvalidWait(f"wait_for_jobs takes at most {WAIT_JOBS_MAX:,} ids, not {len(ids):,}")
    for job_id in ids:
        if not isinstance(job_id, str) or not job_id:
            raise InvalidWait(f"a job id is non-empty text, not {job_id!r}")
        if job_id == own_id:
            raise InvalidWait(f"job {own_id} cannot wait for itself")
    return tuple(ids)


def known(ids: Sequence[str], found: Sequence[WaitedJob], tenant: str) -> list[WaitedJob]:
    """`found` in `ids`' order, or InvalidWait naming the first id that is
    unknown or another tenant's (the two read the same)."""
    by_id = {job.id: job for job in found if job.tenant == tenant}
    for job_id in ids:
        if job_id not in by_id:
            raise InvalidWait(f"wait_for_jobs: no job {job_id!r}")
    return [by_id[job_id] for job_id in ids]


@dataclass(frozen=True, slots=True)
class Signal:
    """What `Queue.signal` answers (and `POST /jobs/{id}/signals/{name}`):
    the stored signal, and whether this call stored it (`created`) or found
    one of that name stored before (whose data it carries; changing nothing)."""

    job_id: str
    name: str
    data: Any
    created: bool


def send_signal(
    store: Waits, job_id: str, name: str, data: Any = None, tenant: str | None = None
) -> Signal:
    """Check and store a signal (`Queue.signal`, the API): InvalidWait for a
    bad name or data, JobNotFound, JobFinished; nothing stored on an error."""
    check_signal_name(name)
    body = check_signal_data(data)
    result = store.signal(job_id, name, body, tenant)
    if result.status is SignalStatus.NOT_FOUND:
        raise JobNotFound(job_id)
    if result.status is SignalStatus.FINISHED:
        raise JobFinished(f"job {job_id} has finished: a signal can no longer change it")
    return Signal(job_id, name, result.data, result.status is SignalStatus.CREATED)
