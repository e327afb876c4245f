"""`GET /metrics`: Prometheus text, derived from the database at scrape time.

Workers are separate processes (often on other machines), so counting in this
process would see nothing they do. Instead every figure is read from the job
and attempt tables when scraped: jobs by state and kind, claims, completions,
failures, attempt durations as a histogram, queue lag and stale leases, and
each limited kind's running and waiting jobs and what is paused. Each scrape
builds a private `CollectorRegistry` (the global one is never touched), scoped
to the caller's tenant; limits and pauses span tenants, so only a key of every
tenant sees them.

Pruning deletes jobs with their attempts, so the counters can go down; Prometheus
treats that as a counter reset, which `rate()` and `increase()` handle.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from chit.api.queues import read_loads
from chit.jobs import AttemptOutcome, State, last_hour_by_kind
from chit.queue import Queue
from chit.store import FullStore

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Seconds; from a quick handler to a half-hour report.
DURATION_BOUNDS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
# Attempts that ended in a failure of the handler or of its worker.
FAILED_OUTCOMES = frozenset(
    {AttemptOutcome.FAILED, AttemptOutcome.RETRIED, AttemptOutcome.LEASE_EXPIRED}
)


class StoreCollector(Collector):
    def __init__(
        self, store: FullStore, tenant: str | None, listeners: int = 0, queue: Queue | None = None
    ) -> None:
        self.store = store
        self.tenant = tenant
        self.listeners = listeners
        self.queue = queue

    def collect(self) -> Iterator[Metric]:
        stats = self.store.stats(self.tenant)
        jobs = GaugeMetricFamily("chit_jobs", "Jobs by state and kind", labels=["state", "kind"])
        for kind, states in sorted(stats.by_kind.items()):
            for state in State:
                jobs.add_metric([state.value, kind], states.get(state.value, 0))
        yield jobs
        yield GaugeMetricFamily(
            "chit_queue_lag_seconds",
            "How long the oldest due queued job has waited",
            value=stats.oldest_queued_age or 0.0,
        )
        yield GaugeMetricFamily(
            "chit_stale_running_jobs",
            "Running jobs whose lease expired (worker gone, not yet rescued)",
            value=stats.stale_running,
        )

        yield from self.last_hour()
        yield from self.queues()

        claims = CounterMetricFamily("chit_claims", "Jobs claimed by workers", labels=["kind"])
        completions = CounterMetricFamily(
            "chit_completions", "Attempts that succeeded", labels=["kind"]
        )
        failures = CounterMetricFamily(
            "chit_failures",
            "Attempts that failed (retried, failed for good, or lease expired)",
            labels=["kind"],
        )
        durations = HistogramMetricFamily(
            "chit_attempt_duration_seconds",
            "How long finished attempts ran, by outcome",
            labels=["kind", "outcome"],
        )
        per_kind: dict[str, list[int]] = {}
        for group in self.store.attempt_stats(DURATION_BOUNDS, self.tenant):
            counts = per_kind.setdefault(group.kind, [0, 0, 0])
            counts[0] += group.count
            if group.outcome is AttemptOutcome.SUCCEEDED:
                counts[1] += group.count
            if group.outcome in FAILED_OUTCOMES:
                counts[2] += group.count
            if group.outcome is None:
                continue
            cumulative, buckets = 0, []
            for bound, count in zip((*DURATION_BOUNDS, float("inf")), group.buckets, strict=True):
                cumulative += count
                buckets.append((_le(bound), cumulative))
            durations.add_metric(
                [group.kind, group.outcome.value], buckets, sum_value=group.duration_sum
            )
        for kind, (claimed, succeeded, failed) in sorted(per_kind.items()):
            claims.add_metric([kind], claimed)
            completions.add_metric([kind], succeeded)
            failures.add_metric([kind], failed)
        yield claims
        yield completions
        yield failures
        yield durations
        yield GaugeMetricFamily(
            "chit_api_event_listeners",
            "Server-Sent Event streams open on this API process",
            value=self.listeners,
        )
        if self.tenant is None:
            yield from self.flow_control()

    def flow_control(self) -> Iterator[Metric]:
        """Each limited kind's jobs against its limit, and what is paused (1)."""
        running = GaugeMetricFamily(
            "chit_limit_running", "Running jobs of a limited kind", labels=["kind"]
        )
        waiting = GaugeMetricFamily(
            "chit_limit_waiting",
            "Queued and due jobs of a limited kind, not running",
            labels=["kind"],
        )
        concurrency = GaugeMetricFamily(
            "chit_limit_concurrency",
            "A kind's concurrency limit in force (kinds with one)",
            labels=["kind"],
        )
        for k in self.store.limits():
            running.add_metric([k.kind], k.running)
            waiting.add_metric([k.kind], k.waiting)
            if k.effective.concurrency is not None:
                concurrency.add_metric([k.kind], k.effective.concurrency)
        paused = GaugeMetricFamily(
            "chit_paused",
            "A paused queue (label queue) or kind (label kind): 1",
            labels=["queue", "kind"],
        )
        for p in self.store.pauses():
            paused.add_metric([p.queue or "", p.kind or ""], 1)
        yield running
        yield waiting
        yield concurrency
        yield paused

    def queues(self) -> Iterator[Metric]:
        """GET /queues as gauges, for autoscaling on Prometheus (docs/autoscaling.md)."""
        loads, workers = read_loads(self.store, self.queue, self.tenant)
        families = {
            "ready": GaugeMetricFamily(
                "chit_queue_ready", "Queued jobs that can start now", labels=["queue"]
            ),
            "scheduled": GaugeMetricFamily(
                "chit_queue_scheduled",
                "Queued jobs due later (a delay, a retry's backoff)",
                labels=["queue"],
            ),
            "running": GaugeMetricFamily(
                "chit_queue_running", "Jobs a worker holds", labels=["queue"]
            ),
            "oldest_ready_seconds": GaugeMetricFamily(
                "chit_queue_oldest_ready_seconds",
                "How long the oldest ready job has waited (0: none)",
                labels=["queue"],
            ),
        }
        for load in loads:
            for field, family in families.items():
                family.add_metric([load.name], getattr(load, field))
        yield from families.values()
        yield GaugeMetricFamily("chit_workers", "Workers alive", value=workers.count)
        yield GaugeMetricFamily(
            "chit_worker_slots", "Handlers the live workers run at once", value=workers.slots
        )
        yield GaugeMetricFamily(
            "chit_worker_slots_busy", "Slots running a job now", value=workers.busy
        )

    def last_hour(self) -> Iterator[Metric]:
        """Rates to alert on, per kind: jobs that failed and succeeded in the last
        hour (read from an index of finish times) and the share that failed. A
        kind with nothing finished in the hour has no series."""
        failed = GaugeMetricFamily(
            "chit_jobs_failed_last_hour",
            "Jobs that failed for good in the last hour",
            labels=["kind"],
        )
        succeeded = GaugeMetricFamily(
            "chit_jobs_succeeded_last_hour", "Jobs that succeeded in the last hour", labels=["kind"]
        )
        rate = GaugeMetricFamily(
            "chit_jobs_failure_rate_last_hour",
            "failed / (failed + succeeded) over the last hour, 0 to 1",
            labels=["kind"],
        )
        for k in last_hour_by_kind(self.store.finished_per_minute(self.tenant)):
            failed.add_metric([k.kind], k.failed)
            succeeded.add_metric([k.kind], k.succeeded)
            if k.failure_rate is not None:
                rate.add_metric([k.kind], k.failure_rate)
        yield failed
        yield succeeded
        yield rate


def render(
    store: FullStore, tenant: str | None, listeners: int = 0, queue: Queue | None = None
) -> bytes:
    """The metrics text (blocking: it queries the store). `queue`: the app's,
    whose tasks' queues are named at zero when empty."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, tenant, listeners, queue))
    return generate_latest(registry)


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)
