"""What the API, the dashboard and the metrics read from Redis (`Reports`),
from the indexes chit.lua keeps as it moves jobs (see reports.lua). A read
that may walk a long index (list, search, failures) takes it over several
calls, each reading a bounded number of entries, so that none holds the server
for the whole walk; `list` walks its index newest first, checking the other
filters on the jobs it finds."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from chit.ids import id_prefix_range
from chit.jobs import (
    Attempt,
    AttemptOutcome,
    AttemptStats,
    FailureGroup,
    Job,
    JobFilter,
    MinuteCount,
    Page,
    State,
    StateKindCount,
    Stats,
    Step,
)
from chit.store.capabilities import Reports
from chit.store.redis import codec
from chit.store.redis.codec import clock, loads, ms
from chit.store.redis.core import RedisCore, tenant_arg

# Failed jobs a call of `failures` reads at most: a long retention of
# failures is read over several calls, none holding the server for long.
FAILURE_READS = 5000


def _jobs(flats: Sequence[Any], now_ms: int) -> list[Job]:
    return [codec.job(codec.pairs(flat), now_ms) for flat in flats]


def _counts(flat: Sequence[Any], tenant: str | None) -> dict[tuple[str, str], int]:
    """P:cnt (state NUL kind NUL tenant -> jobs) summed by state and kind."""
    counts: dict[tuple[str, str], int] = {}
    for field, n in codec.pairs(list(flat)).items():
        state, kind, owner = str(field).split("\0", 2)
        if tenant is None or owner == tenant:
            counts[state, kind] = counts.get((state, kind), 0) + int(n)
    return counts


class ReportsRedis(RedisCore, Reports):
    def attempts(self, job_id: str) -> builtins.list[Attempt]:
        out: builtins.list[Any] = []
        for record in self.redis.fcall_ro("chit_attempts", job_id):
            a = loads(record)
            finished = a.get("finished_at")
            outcome = a.get("outcome")
            out.append(
                Attempt(
                    job_id,
                    int(a["attempt"]),
                    a["worker"],
                    codec.at(str(a["started_at"])),
                    None if finished is None else codec.at(str(finished)),
                    None if outcome is None else AttemptOutcome(outcome),
                    a.get("error"),
                )
            )
        return out

    def steps(self, job_id: str) -> builtins.list[Step]:
        flat = self.redis.fcall_ro("chit_steps", job_id)
        out: builtins.list[Any] = []
        for name, stored in zip(flat[::2], flat[1::2], strict=True):
            attempt, created_at, result = str(stored).split("|", 2)
            out.append(Step(job_id, name, int(attempt), loads(result), codec.at(created_at)))
        return out

    def list(self, where: JobFilter, limit: int = 50, cursor: str | None = None) -> Page:
        args = [
            "",
            "" if where.state is None else str(where.state),
            where.kind or "",
            where.queue or "",
            tenant_arg(where.tenant),
            "" if where.since is None else ms(where.since),
        ]
        jobs: builtins.list[Job] = []
        after = cursor or ""
        while True:  # a call reads a bounded number of ids (reports.lua's LIST_READS)
            wanted = limit + 1 - len(jobs)
            now, after, *flats = self.redis.fcall_ro("chit_list", *args, after, wanted)
            jobs += _jobs(flats, int(now))
            if not after or len(jobs) > limit:
                break
        if len(jobs) > limit:
            return Page(jobs[:limit], jobs[limit - 1].id)
        return Page(jobs, None)

    def failures(self, tenant: str | None = None) -> builtins.list[FailureGroup]:
        # Each call reads and groups FAILURE_READS failed jobs at most; the
        # groups of each are merged.
        merged: dict[tuple[str, str], list[Any]] = {}
        after, after_id = "", ""  # the last job read: its finish time and id
        while True:
            after, after_id, *rows = self.redis.fcall_ro(
                "chit_failures", tenant_arg(tenant), after, after_id, FAILURE_READS
            )
            for kind, line, n, first, last, latest in rows:
                group = merged.get((kind, line))
                if group is None:
                    merged[kind, line] = [int(n), int(first), int(last), latest]
                else:
                    group[0] += int(n)
                    group[1] = min(group[1], int(first))
                    group[2] = max(group[2], int(last))
                    group[3] = max(group[3], latest)
            if not after:
                break
        groups = [
            FailureGroup(kind, line, n, codec.at(str(first)), codec.at(str(last)), latest)
            for (kind, line), (n, first, last, latest) in merged.items()
        ]
        return sorted(groups, key=lambda g: (-g.count, -g.last_seen.timestamp()))

    def stats(self, tenant: str | None = None, now: datetime | None = None) -> Stats:
        flat, failed, succeeded, oldest, stale, now_ms = self.redis.fcall_ro(
            "chit_stats", clock(now), tenant_arg(tenant)
        )
        by_state = {s.value: 0 for s in State}
        by_kind: dict[str, dict[str, int]] = {}
        for (state, kind), n in _counts(flat, tenant).items():
            by_state[state] += n
            by_kind.setdefault(kind, {})[state] = n
        return Stats(
            by_state=by_state,
            by_kind=by_kind,
            failed_last_hour=int(failed),
            succeeded_last_hour=int(succeeded),
            oldest_queued_age=None if int(oldest) < 0 else (int(now_ms) - int(oldest)) / 1000,
            stale_running=int(stale),
        )

    def get_many(self, job_ids: Sequence[str]) -> builtins.list[Job]:
        if not job_ids:
            return []
        now, *flats = self.redis.fcall_ro("chit_get_many", "", *job_ids)
        return _jobs(flats, int(now))

    def attempt_stats(
        self, bounds: Sequence[float], tenant: str | None = None
    ) -> builtins.list[AttemptStats]:
        rows, flat = self.redis.fcall_ro("chit_attempt_stats", tenant_arg(tenant), *bounds)
        groups: dict[tuple[str, str | None], tuple[int, float, list[int]]] = {}
        for group, n, seconds, *buckets in rows:
            kind, outcome, _ = str(group).split("\0", 2)
            total, duration, counts = groups.get((kind, outcome), (0, 0.0, [0] * len(buckets)))
            counts = [a + int(b) for a, b in zip(counts, buckets, strict=True)]
            groups[kind, outcome] = (total + int(n), duration + float(seconds), counts)
        for (state, kind), n in _counts(flat, tenant).items():
            if state == "running":
                groups[kind, None] = (n, 0.0, [0] * (len(bounds) + 1))
        return [
            AttemptStats(kind, None if outcome is None else AttemptOutcome(outcome), n, s, tuple(b))
            for (kind, outcome), (n, s, b) in sorted(
                groups.items(), key=lambda item: (item[0][0], item[0][1] or "")
            )
        ]

    def count_jobs(
        self, tenant: str | None = None, cap: int = 10_000
    ) -> builtins.list[StateKindCount]:
        flat = self.redis.run(lambda: self.redis.client.hgetall(f"{self.prefix}:cnt"))
        counts = _counts([x for pair in flat.items() for x in pair], tenant)
        return [
            StateKindCount(State(state), kind, min(n, cap), n >= cap)
            for (state, kind), n in sorted(counts.items())
            if n
        ]

    def finished_per_minute(
        self, tenant: str | None = None, now: datetime | None = None
    ) -> builtins.list[MinuteCount]:
        flat = self.redis.fcall_ro("chit_finished_per_minute", clock(now), tenant_arg(tenant))
        counts: dict[tuple[int, str, str], int] = {}
        for i in range(0, len(flat), 3):
            state, kind, finished = flat[i : i + 3]
            minute = int(finished) // 60_000 * 60_000
            counts[minute, kind, state] = counts.get((minute, kind, state), 0) + 1
        return [
            MinuteCount(datetime.fromtimestamp(m / 1000, UTC), kind, State(state), n)
            for (m, kind, state), n in sorted(counts.items())
        ]

    def oldest_queued(self, tenant: str | None = None, now: datetime | None = None) -> Job | None:
        out = self.redis.fcall_ro("chit_oldest_queued", clock(now), tenant_arg(tenant))
        return _jobs(out[1:], int(out[0]))[0] if len(out) > 1 else None

    def stale_jobs(
        self, tenant: str | None = None, limit: int = 20, now: datetime | None = None
    ) -> builtins.list[Job]:
        now_ms, *flats = self.redis.fcall_ro(
            "chit_stale_jobs", clock(now), tenant_arg(tenant), limit
        )
        return _jobs(flats, int(now_ms))

    def search(self, text: str, tenant: str | None = None, limit: int = 50) -> builtins.list[Job]:
        text = text.strip()
        if not text:
            return []
        owner = tenant_arg(tenant)
        found: dict[str, Job] = {}
        cursor = "0"
        while True:  # all tenants' keys: one HSCAN step a call
            now, cursor, *flats = self.redis.fcall_ro("chit_search_keys", "", owner, text, cursor)
            found |= {job.id: job for job in _jobs(flats, int(now))}
            if str(cursor) == "0":
                break
        bounds = id_prefix_range(text)
        if bounds is not None:
            low, high = bounds
            after, matched = "", 0
            while matched < limit:  # a call reads a bounded number of ids (LIST_READS)
                now, after, *flats = self.redis.fcall_ro(
                    "chit_search_ids", "", owner, low, high, after, limit - matched
                )
                matched += len(flats)
                found |= {job.id: job for job in _jobs(flats, int(now))}
                if not after:
                    break
        return sorted(found.values(), key=lambda j: j.id, reverse=True)[:limit]

    def replay_failure_group(self, kind: str, error: str, tenant: str | None = None) -> int:
        args = ["", tenant_arg(tenant), kind, error]
        return int(self.redis.fcall("chit_replay_failure_group", *args))
