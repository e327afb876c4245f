"""The Redis store's part of chit/fleet.py (`Fleet`; fleet.lua): workers'
beats, and each queue's counts from its ready, scheduled and running sets."""

from __future__ import annotations

from datetime import datetime

from chit.fleet import LiveWorker, QueueCounts, WorkerBeat
from chit.store.capabilities import Fleet
from chit.store.redis import codec
from chit.store.redis.codec import clock, dumps, loads
from chit.store.redis.core import RedisCore, tenant_arg


class FleetRedis(RedisCore, Fleet):
    def beat_worker(
        self, beat: WorkerBeat, stale_after: float, now: datetime | None = None
    ) -> None:
        said = {"host": beat.host, "pid": beat.pid, "queues": list(beat.queues)}
        said |= {"kinds": list(beat.kinds), "slots": beat.slots, "busy": beat.busy}
        args = [clock(now), beat.id, dumps(said), int(stale_after * 1000)]
        self.redis.fcall("chit_beat_worker", *args)

    def forget_worker(self, worker_id: str) -> None:
        self.redis.fcall("chit_forget_worker", worker_id)

    def live_workers(self, now: datetime | None = None) -> list[LiveWorker]:
        flat = self.redis.fcall_ro("chit_live_workers", clock(now))
        workers = []
        for worker_id, stored in zip(flat[::2], flat[1::2], strict=True):
            b = loads(stored)
            beat = WorkerBeat(
                worker_id,
                b["host"],
                int(b["pid"]),
                tuple(b["queues"]),
                tuple(b["kinds"]),
                int(b["slots"]),
                int(b["busy"]),
            )
            started, seen = codec.at(str(b["started_at"])), codec.at(str(b["seen_at"]))
            workers.append(LiveWorker(beat, started, seen))
        return sorted(workers, key=lambda w: (w.started_at, w.beat.id))

    def queue_counts(
        self, tenant: str | None = None, now: datetime | None = None
    ) -> list[QueueCounts]:
        now_ms, rows = self.redis.fcall_ro("chit_queue_counts", clock(now), tenant_arg(tenant))
        return [
            QueueCounts(
                queue,
                int(ready),
                int(scheduled),
                int(running),
                0.0 if int(oldest) < 0 else (int(now_ms) - int(oldest)) / 1000,
            )
            for queue, ready, scheduled, running, oldest in sorted(rows)
        ]
