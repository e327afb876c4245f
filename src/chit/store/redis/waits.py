"""Waits on Redis (`Waits`): signals, what a waiting job's rerun reads, and
the deadline's wake-up, one call each (waits.lua); the Suspended outcome is
recorded by `chit_finish` like the others."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from chit.jobs import Received, SignalResult, SignalStatus, State, WaitedJob
from chit.store.capabilities import Waits
from chit.store.redis.codec import clock, dumps, loads, opt_json
from chit.store.redis.core import RedisCore, tenant_arg


class WaitsRedis(RedisCore, Waits):
    def signal(self, job_id: str, name: str, data: Any, tenant: str | None = None) -> SignalResult:
        out = self.redis.fcall("chit_signal", "", job_id, name, dumps(data), tenant_arg(tenant))
        status = SignalStatus(out[0])
        stored = out[1] if len(out) > 1 else ""
        return SignalResult(status, loads(stored) if stored != "" else None)

    def received(self, job_id: str, name: str) -> Received:
        stored = self.redis.fcall_ro("chit_received", job_id, name)
        if stored is None:
            return Received(False)
        if stored == "":
            return Received(False, timed_out=True)
        return Received(True, loads(stored))

    def waited_jobs(self, job_id: str, ids: Sequence[str]) -> tuple[list[WaitedJob], bool]:
        out = self.redis.fcall_ro("chit_waited_jobs", "", job_id, dumps(list(ids)))
        jobs = [
            WaitedJob(
                id=out[i],
                kind=out[i + 1],
                state=State(out[i + 2]),
                tenant=out[i + 3],
                result=opt_json(out[i + 4] or None),
                result_external=out[i + 5] == "1",
                error=out[i + 6] or None,
            )
            for i in range(1, len(out), 7)
        ]
        return jobs, out[0] == 1

    def wake_waiters(self, now: datetime | None = None) -> int:
        return int(self.redis.fcall("chit_wake_waiters", clock(now)))
