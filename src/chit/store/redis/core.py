"""The Redis store's core: the contract of `chit.store.base.Store`, each transition
one call (FCALL) of a function of chit's Lua library (enqueue.lua, lifecycle.lua,
operating.lua), so it is atomic on the server and costs one round trip.

Round trips: enqueue_many 1 (a workflow naming stored jobs: 2, reading them
first); claim 1; finish 1; finish_and_claim 1; heartbeat 1; checkpoint 1;
save_step 1; rescue_expired 1; expire_jobs 1; get 1; cancel 1; update 1;
replay 1; prune 1 a batch; an idle wait 1, then a blocking BLPOP on the
queues' wake lists (one more each 50 ms, to see `stop`).

Durability: the store refuses a server without `appendonly yes` and
`maxmemory-policy noeviction`; with the default `appendfsync everysec` a
crash of the machine, or of Redis while its disk is slow (it then postpones
writing its AOF buffer up to 2 s), can lose the last seconds of writes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterator, Sequence
from datetime import datetime
from typing import Any

from chit.errors import InvalidRequest, StoreError
from chit.ids import new_job_ids
from chit.jobs import (
    Beat,
    Cancelled,
    CancelResult,
    ChangeResult,
    Claimed,
    DependencyInfo,
    Enqueued,
    Failed,
    HeartbeatResult,
    Job,
    JobChange,
    NewJob,
    Outcome,
    Progress,
    Released,
    ReplaySelector,
    RescueReport,
    Snoozed,
    State,
    Succeeded,
    Suspended,
)
from chit.store import graph
from chit.store.base import Store, StoredStep
from chit.store.capabilities import ClaimsOnWake
from chit.store.flow import Claim
from chit.store.redis import codec
from chit.store.redis.codec import clock, dumps, loads, ms, when
from chit.store.redis.connection import VERSION, Connection

# Jobs a prune call deletes at most: short calls, whatever the backlog.
PRUNE_BATCH = 1_000
# How soon an idle worker's blocking wait sees that it was told to stop.
_STOP_CHECK_SECONDS = 0.05
# How often an enqueue reads again stored dependencies that changed under it.
_GRAPH_TRIES = 5
# Arguments a job takes in enqueue.lua (`_fields`), and with a workflow's columns.
_PLAIN_WIDTH = 20
_GRAPH_WIDTH = 29
# The first fields alone, for a batch whose jobs have none of the rest
# (enqueue.lua's SHORT): a plain job's call is 12 arguments shorter.
_SHORT_WIDTH = 8
_NONE_LATER = [""] * (_PLAIN_WIDTH - _SHORT_WIDTH)  # a short row's later fields


def runnable_kinds(kinds: Collection[str] | None) -> frozenset[str] | None:
    return None if kinds is None else frozenset(kinds)


def _s(value: Any) -> Any:
    """A value as an FCALL argument: None as ""."""
    return "" if value is None else value


def tenant_arg(tenant: str | None) -> str:
    return "" if tenant is None else "=" + tenant


def _progress(progress: Progress | None) -> list[Any]:
    """has progress ("": none; "1": numbers; "m" and the message: numbers with a
    message), done, total: as lifecycle.lua's `progressed` reads them."""
    if progress is None:
        return ["", "", ""]
    given = "1" if progress.message is None else "m" + progress.message
    return [given, _s(progress.done), _s(progress.total)]


class RedisCore(Store, ClaimsOnWake):
    concurrent_writes = True
    # Hand-backs of one job that do not use up its attempt (CHIT_FREE_HAND_BACKS).
    free_hand_backs: int = 3

    def __init__(
        self,
        url: str,
        *,
        prefix: str | None = None,
        result_inline_bytes: int = 64 * 1024,
        migrate: bool = True,
        wait_aof: bool = False,
    ) -> None:
        self.result_inline_bytes = result_inline_bytes
        self.redis = Connection(url, prefix)
        self.prefix = self.redis.prefix
        self.redis.check_durability()
        if wait_aof:
            self.redis.check_wait_aof()
            self.redis.wait_aof = True
        if migrate:
            self.migrate()

    # Layout

    def migrate(self) -> int:
        loaded = self.redis.loaded_version()
        if loaded > VERSION:
            raise StoreError(
                f"Redis at {self.redis.name} has chit's functions version {loaded},"
                f" newer than this chit ({VERSION}); upgrade chit"
            )
        if loaded < VERSION:
            self.redis.load()
        # Each prefix's own: the server's library may have been upgraded by
        # another deployment on it.
        cursor = "0"
        while not (step := self.redis.fcall("chit_upgrade_layout", cursor))[0]:
            cursor = step[1]
        return VERSION

    def schema_version(self) -> int:
        return self.redis.loaded_version()

    # Submitting

    def enqueue_many(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        jobs = list(jobs)  # each read (and checked) before anything is sent
        if not jobs:
            return []
        ids = new_job_ids(len(jobs))
        if graph.is_graph(jobs):
            return self._enqueue_graph(ids, jobs)
        rows = [self._fields(job_id, job) for job_id, job in zip(ids, jobs, strict=True)]
        short = all(row[_SHORT_WIDTH:] == _NONE_LATER for row in rows)
        width = _SHORT_WIDTH if short else _PLAIN_WIDTH
        args: list[Any] = ["", width, ""]
        for row in rows:
            args += row[:width]
        return self._enqueued(jobs, self.redis.fcall_synced("chit_enqueue", *args), None)

    def _fields(self, job_id: str, job: NewJob) -> list[Any]:
        payload = job.payload_json if job.payload_json is not None else dumps(job.payload)
        debounce = job.debounce
        return [
            job_id,
            job.kind,
            job.queue,
            job.priority,
            payload,
            job.max_attempts,
            "" if job.run_at is None else ms(job.run_at),
            job.tenant,
            _s(job.idempotency_key),
            _s(job.request_hash),
            job.concurrency_key,
            _s(job.timeout),
            "" if job.expires_at is None else ms(job.expires_at),
            _s(job.expires_in),
            _s(job.unique_key),
            _s(job.traceparent),
            "" if debounce is None else debounce.key,
            "" if debounce is None else debounce.delay,
            "" if debounce is None else debounce.bound,
            _s(job.cost),
        ]

    def _enqueue_graph(self, ids: list[str], jobs: list[NewJob]) -> list[Enqueued]:
        """A batch with refs or dependencies: checked and planned (chit.store.graph)
        on the stored jobs it names as read first; the enqueue stores nothing
        and is tried again if one of those changed in between."""
        edges = graph.check(jobs, ids)
        depended = {target for targets in edges.depends_on for target in targets}
        for _ in range(_GRAPH_TRIES):
            found: dict[str, graph.Stored] = {}
            if edges.stored:
                rows = self.redis.fcall_ro("chit_lookup", *edges.stored)
                for job_id, (tenant, state, workflow_id) in zip(edges.stored, rows, strict=True):
                    if state is not None:
                        found[job_id] = graph.Stored(tenant, State(state), workflow_id)
            joined = (found[t].workflow_id for t in edges.stored if t in found)
            workflow_id = next(filter(None, joined), None) or new_job_ids(1)[0]
            plans = graph.plan(jobs, edges, found, workflow_id)
            expected = dumps({t: str(s.state) for t, s in found.items()}) if found else ""
            args: list[Any] = ["", _GRAPH_WIDTH, expected]
            for job_id, job, columns in zip(ids, jobs, plans, strict=True):
                args += self._fields(job_id, job)
                args += [
                    columns["state"],
                    _s(columns["error"]),
                    columns["deps_pending"],
                    workflow_id,
                    _s(columns["ref"]),
                    columns["run_on"],
                    "" if not columns["depends_on"] else dumps(columns["depends_on"]),
                    "" if not columns["dependents"] else dumps(columns["dependents"]),
                    "1" if job_id in depended else "",
                ]
            out = self.redis.fcall_synced("chit_enqueue", *args)
            if out != ["retry"]:
                return self._enqueued(jobs, out, workflow_id)
        raise StoreError(f"could not enqueue: the jobs depended on changed {_GRAPH_TRIES} times")

    def _enqueued(
        self, jobs: list[NewJob], out: list[Any], workflow_id: str | None
    ) -> list[Enqueued]:
        if out and out[0] == "depended":
            raise InvalidRequest(
                f"job {out[1]}: its idempotency or unique key matched a stored job, so the jobs"
                " of this call that depend on it cannot be linked; leave the key off"
            )
        if out and out[0] == "invalid":
            raise StoreError(f"Redis at {self.redis.name}: job {out[1]}: {out[2]}")
        if out and out[0] == "kind":
            _, _, holder, kind, key = out
            raise InvalidRequest(
                f"debounce key {key!r} is held by job {holder} of"
                f" kind {kind!r}, not started yet: a key debounces one kind"
            )
        results = []
        for i in range(0, len(out), 3):
            code, job_id, request_hash = out[i : i + 3]
            if code == "c":  # then the third item is the job's created_at
                created_at = when(str(request_hash))
                results.append(
                    Enqueued(job_id, True, workflow_id=workflow_id, created_at=created_at)
                )
            elif code == "i":
                results.append(Enqueued(job_id, False, request_hash))
            elif code == "d":
                results.append(Enqueued(job_id, False, debounced=True))
            else:
                results.append(Enqueued(job_id, False, unique=True))
        return results

    # Working

    def _claim_args(self, claim: Claim, held: Sequence[str] = ()) -> list[Any]:
        """chit.lua's claim arguments; `held`: kinds left to flow claims."""
        runnable = "" if claim.kinds is None else dumps(sorted(claim.kinds))
        lease = int(claim.lease_seconds * 1000)
        queues = claim.queues
        held_json = dumps(held) if held else ""
        return [claim.worker, lease, claim.limit, runnable, held_json, len(queues), *queues]

    def claim(
        self,
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        now: datetime | None = None,
        kinds: Collection[str] | None = None,
    ) -> Claimed:
        if limit <= 0 or not queues:
            return Claimed()
        claim = Claim(worker, queues, limit, lease_seconds, runnable_kinds(kinds))
        return self._claim(claim, clock(now))

    def _claim(self, claim: Claim, now: str) -> Claimed:
        return self._claim_held(claim, now, ())

    def _claim_held(self, claim: Claim, now: str, held: Sequence[str]) -> Claimed:
        """A claim at `now` (chit.lua's time argument), in one call, leaving the
        `held` kinds' jobs queued."""
        args = self._claim_args(claim, held)
        return Claimed(codec.claimed(self.redis.fcall("chit_claim", now, *args)))

    def _outcomes(self, outcomes: Sequence[Outcome]) -> list[Any]:
        args: list[Any] = [len(outcomes)]
        for o in outcomes:
            match o:
                case Succeeded(result=result, progress=progress):
                    encoded = dumps(result)
                    large = "1" if len(encoded.encode()) > self.result_inline_bytes else ""
                    args += ["S", o.job_id, o.lease_token, encoded, large, *_progress(progress)]
                case Failed(error=error, retry_in=retry_in):
                    retry = "" if retry_in is None else int(retry_in * 1000)
                    args += ["F", o.job_id, o.lease_token, error, retry, "", "", ""]
                case Released():
                    args += ["R", o.job_id, o.lease_token, "", "", "", "", ""]
                case Cancelled():
                    args += ["C", o.job_id, o.lease_token, "", "", "", "", ""]
                case Snoozed(delay=delay):
                    args += ["Z", o.job_id, o.lease_token, int(delay * 1000), "", "", "", ""]
                case Suspended(signal=signal, jobs=jobs, timeout=timeout):
                    wait: list[Any] = ["" if signal is None else signal]
                    wait.append("" if jobs is None else dumps(list(jobs)))
                    wait.append("" if timeout is None else max(1, int(timeout * 1000)))
                    args += ["W", o.job_id, o.lease_token, *wait, "", ""]
        return args

    def finish(self, outcomes: Sequence[Outcome], now: datetime | None = None) -> list[bool]:
        return self.finish_at(outcomes, clock(now))

    def finish_at(self, outcomes: Sequence[Outcome], now: str) -> list[bool]:
        """`finish` at chit.lua's time argument."""
        if not outcomes:
            return []
        args = [now, self.free_hand_backs, *self._outcomes(outcomes)]
        return [bool(n) for n in self.redis.fcall("chit_finish", *args)]

    def finish_and_claim(
        self,
        outcomes: Sequence[Outcome],
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        now: datetime | None = None,
        kinds: Collection[str] | None = None,
    ) -> tuple[list[bool], Claimed]:
        if not outcomes:
            return [], self.claim(worker, queues, limit, lease_seconds, now, kinds)
        if limit <= 0 or not queues:
            return self.finish(outcomes, now), Claimed()
        claim = Claim(worker, queues, limit, lease_seconds, runnable_kinds(kinds))
        return self._finish_and_claim(outcomes, claim, clock(now))

    def _finish_and_claim(
        self, outcomes: Sequence[Outcome], claim: Claim, now: str, held: Sequence[str] = ()
    ) -> tuple[list[bool], Claimed]:
        """Both in one call, the claim leaving the `held` kinds' jobs queued."""
        outcome_args = self._outcomes(outcomes)
        args = [now, self.free_hand_backs, *outcome_args, *self._claim_args(claim, held)]
        applied, rows = self.redis.fcall("chit_finish_claim", *args)
        return [bool(n) for n in applied], Claimed(codec.claimed(rows))

    def heartbeat(
        self, beats: Sequence[Beat], lease_seconds: float, now: datetime | None = None
    ) -> HeartbeatResult:
        if not beats:
            return HeartbeatResult(frozenset(), frozenset())
        args: list[Any] = [clock(now), int(lease_seconds * 1000)]
        for b in beats:
            args += [b.job_id, b.lease_token, *_progress(b.progress)]
        out = self.redis.fcall("chit_heartbeat", *args)
        held = out[::2]
        return HeartbeatResult(
            held=frozenset(held),
            cancel_requested=frozenset(j for j, c in zip(held, out[1::2], strict=True) if c),
        )

    def checkpoint(
        self,
        job_id: str,
        lease_token: str,
        data: Any,
        progress: Progress | None,
        lease_seconds: float,
        now: datetime | None = None,
    ) -> bool:
        args = [clock(now), job_id, lease_token, dumps(data), int(lease_seconds * 1000)]
        return bool(self.redis.fcall("chit_checkpoint", *args, *_progress(progress)))

    def step(self, job_id: str, name: str) -> StoredStep:
        key = f"{self.prefix}:st:{job_id}"
        stored = self.redis.run(lambda: self.redis.client.hget(key, name))
        if stored is None:
            return False, None
        return True, loads(str(stored).split("|", 2)[2])

    def save_step(
        self,
        job_id: str,
        lease_token: str,
        name: str,
        result: Any,
        now: datetime | None = None,
    ) -> bool:
        args = [clock(now), job_id, lease_token, name, dumps(result)]
        return bool(self.redis.fcall("chit_save_step", *args))

    def rescue_expired(self, now: datetime | None = None) -> RescueReport:
        return RescueReport(*self._sweep("chit_rescue_expired", now))

    def expire_jobs(self, now: datetime | None = None) -> int:
        return self._sweep("chit_expire_jobs", now)[0]

    def _sweep(self, function: str, now: datetime | None) -> list[int]:
        """A sweep's counts, summed over calls: each takes a bounded number
        (lifecycle.lua's SWEEP) and says whether more may be left, so that a
        fleet's worth of lost leases never holds the server in one long call."""
        total: list[int] = []
        while True:
            *counts, more = self.redis.fcall(function, clock(now))
            total = [t + int(c) for t, c in zip(total or [0] * len(counts), counts, strict=True)]
            if not more:
                return total

    # Reading

    def get(self, job_id: str, tenant: str | None = None) -> Job | None:
        out = self.redis.fcall_ro("chit_get", job_id, tenant_arg(tenant))
        if not out:
            return None
        fields, now_ms, states = out
        return codec.job(codec.pairs(fields), int(now_ms), codec.pairs(states))

    def dependencies(self, job_id: str) -> list[DependencyInfo]:
        out = self.redis.fcall_ro("chit_dependencies", job_id)
        return [
            DependencyInfo(
                out[i], out[i + 1], State(out[i + 2]), codec.opt_json(out[i + 3]), out[i + 4] == "1"
            )
            for i in range(0, len(out), 5)
        ]

    def get_result(self, job_id: str, tenant: str | None = None) -> tuple[bool, Any]:
        out = self.redis.fcall_ro("chit_get_result", job_id, tenant_arg(tenant))
        if not out[0]:
            return False, None
        return True, codec.opt_json(out[1] if len(out) > 1 else None)

    # Operating

    def cancel(self, job_id: str, tenant: str | None = None) -> CancelResult:
        return CancelResult(self.redis.fcall("chit_cancel", "", job_id, tenant_arg(tenant)))

    def update(self, job_id: str, change: JobChange, tenant: str | None = None) -> ChangeResult:
        args = [
            "",
            job_id,
            tenant_arg(tenant),
            "1" if change.run_now else "",
            "" if change.run_at is None else ms(change.run_at),
            _s(change.priority),
            _s(change.payload_json),
        ]
        return ChangeResult(self.redis.fcall("chit_update", *args))

    def replay(self, selector: ReplaySelector) -> int:
        since = "" if selector.since is None else ms(selector.since)
        args = [
            "",
            tenant_arg(selector.tenant),
            _s(selector.kind),
            _s(selector.error_prefix),
            since,
        ]
        return int(self.redis.fcall("chit_replay", *args, *selector.ids))

    def prune(self, older_than_seconds: float, now: datetime | None = None) -> int:
        deleted = 0
        while True:
            args = [clock(now), int(older_than_seconds * 1000), PRUNE_BATCH]
            count, read = self.redis.fcall("chit_prune", *args)
            deleted += int(count)
            if int(read) < PRUNE_BATCH:
                return deleted

    def wait_for_jobs(
        self, queues: Sequence[str], timeout: float, stop: threading.Event | None = None
    ) -> None:
        """A blocking read of the queues' wake lists (enqueue pushes to them),
        bounded by when the first scheduled job of theirs is due."""
        if not queues:
            time.sleep(timeout) if stop is None else stop.wait(timeout)
            return
        keys = [f"{self.prefix}:w:{q}" for q in queues]
        client = self.redis.client
        for wait in self._waits(queues, timeout, stop):
            if self.redis.run(lambda w=wait: client.blpop(keys, w)) is not None:  # type: ignore[misc]
                return

    def claim_on_wake(
        self,
        worker: str,
        queues: Sequence[str],
        limit: int,
        lease_seconds: float,
        timeout: float,
        stop: threading.Event | None = None,
        kinds: Collection[str] | None = None,
    ) -> Claimed | None:
        """ClaimsOnWake: each blocking read moves a wake token into the worker's
        own list (BLMOVE, one queue's list only), and chit_claim_woken, sent
        behind it in one pipeline, claims if it finds one there. The claim a
        wake needs costs no round trip of its own: the worker is running the
        job when it would have been sending the claim."""
        claim = Claim(worker, queues, limit, lease_seconds, runnable_kinds(kinds))
        if limit <= 0 or len(queues) != 1 or not self._claims_in_one_call(claim):
            self.wait_for_jobs(queues, timeout, stop)
            return None
        key, mine = f"{self.prefix}:w:{queues[0]}", f"{self.prefix}:wk:{worker}"
        args = ["", *self._claim_args(claim)]

        def wait_then_claim(wait: float) -> Any:
            return self.redis.send(
                ("BLMOVE", key, mine, "LEFT", "LEFT", wait),
                ("FCALL", "chit_claim_woken", 1, self.prefix, *args),
            )[1]

        for wait in self._waits(queues, timeout, stop):
            try:
                rows = self.redis.run(lambda w=wait: wait_then_claim(w))  # type: ignore[misc]
            except StoreError as e:
                if "Function not found" not in str(e):
                    raise
                # A server restarted without the library: a token the move took
                # is still in the worker's list, for the claim to find.
                self.redis.load()
                rows = self.redis.fcall("chit_claim_woken", *args)
            if rows is not None:  # woken: what it claimed, perhaps nothing
                return Claimed(codec.claimed(rows))
        return None

    def _claims_in_one_call(self, claim: Claim) -> bool:
        """Whether `claim` is one chit_claim call (flow control's are not)."""
        return True

    def _waits(
        self, queues: Sequence[str], timeout: float, stop: threading.Event | None
    ) -> Iterator[float]:
        """The timeouts of a wait's blocking reads: `timeout` at most, bounded by
        when the first scheduled job of `queues` is due, in pieces short enough
        to see `stop`."""
        due_ms = int(self.redis.fcall_ro("chit_next_due", *queues))
        if due_ms >= 0:
            timeout = min(timeout, due_ms / 1000)
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            if stop is not None and stop.is_set():
                return
            yield min(remaining, _STOP_CHECK_SECONDS)

    def close(self) -> None:
        self.redis.close()
