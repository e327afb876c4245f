"""Run one workload against one system and print its figures as JSON.

Started by run.py in the system's own virtual environment, with the system's
database or broker already fresh and empty:

    python bench/drive.py SYSTEM WORKLOAD [--jobs N] [--workers W] [--cap SECONDS]

Workloads:
  enqueue   N jobs, one call each                      -> jobs/s
  bulk      N jobs in the library's bulk call          -> jobs/s
  process   N queued jobs, W worker processes          -> jobs/s, first handler start
            to last handler end, and every job counted once
  latency   N jobs 10-30 ms apart to one idle worker   -> median and p99 ms from
            just before the enqueue call to the handler's first line
  growth    --finished F done jobs and N queued jobs seeded by bulk SQL (then
            ANALYZE with --analyze), one worker; jobs/s over the first --measure jobs
  rate      process, with the kind limited by --kind-rate N/period: the attempts'
            start times from the store -> the rate held (N over the mean time from
            a start to the N-th after it, after the first N) and the most starts
            in any window of the period

--kind-concurrency N and --kind-rate N/s limit the no-op kind (a task's
`concurrency` and `rate`, PgQueuer's `concurrency_limit`); a process run then
also gives the most handler runs that overlapped.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from recorder import Record, Records  # noqa: E402
from systems import System, load  # noqa: E402

STOP_GRACE = 10.0


class Timeout(Exception):
    """The time cap passed; `partial` holds the figures over the jobs that did run."""

    partial: dict[str, Any] | None = None


def capped(records: Records, n: int, deadline: float, workers: Workers) -> None:
    """wait_for, and on the time cap the throughput of what ran so far."""
    try:
        wait_for(records, n, deadline, workers)
    except Timeout as e:
        records.poll()
        if len(records.records) > 1:
            e.partial = throughput(records.records, len(records.records))
        raise


class Workers:
    """The worker processes of one run: started with the bench directory on the
    path and the record directory in the environment; stopped with SIGTERM, then
    SIGKILL. Their output goes to one log file."""

    def __init__(self, system: System, workers: int, log: Path, profile: Path | None) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.spies: list[subprocess.Popen[bytes]] = []
        self.log = log.open("ab")
        for n, cmd in enumerate(system.worker_commands(workers)):
            proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
            self.procs.append(proc)
            if profile is not None:
                self.spies.append(_spy(proc.pid, profile / f"{log.stem}-{n}"))

    def alive(self) -> None:
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"worker {proc.args} exited with {proc.returncode}")

    def cpu_seconds(self) -> float:
        """CPU time used so far by every process in this process group but the
        driver and py-spy: the workers and whatever children they started."""
        me, group = os.getpid(), os.getpgrp()
        spies = {spy.pid for spy in self.spies}
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                text = stat.read_text()
            except OSError:
                continue
            fields = text[text.rindex(")") + 2 :].split()
            pid = int(stat.parent.name)
            if int(fields[2]) != group or pid == me or pid in spies:
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for spy in self.spies:
            try:
                spy.wait(30)
            except subprocess.TimeoutExpired:
                spy.kill()
        self.log.close()


def _spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy on one worker until it exits: collapsed stacks (one line per stack,
    then its sample count) with thread ids and the idle frames left out."""
    py_spy = os.environ.get("BENCH_PY_SPY", "py-spy")
    cmd = [py_spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "250",
           "--subprocesses", "--output", f"{out}.txt", "--nonblocking"]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_for(records: Records, n: int, deadline: float, workers: Workers | None = None) -> None:
    while records.poll() < n:
        if time.monotonic() > deadline:
            raise Timeout(f"{len(records.records)} of {n} jobs ran before the time cap")
        if workers is not None:
            workers.alive()
        time.sleep(0.05)


def wait_store(system: System, n: int, deadline: float) -> int | None:
    """The store's own count of finished jobs, once it reaches n (or the cap)."""
    while True:
        done = system.completed()
        if done is None or done >= n or time.monotonic() > deadline:
            return done
        time.sleep(0.05)


def wait_drained(system: System, deadline: float) -> int:
    while True:
        left = system.waiting()
        if left == 0 or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def throughput(records: list[Record], n: int) -> dict[str, Any]:
    ends = sorted(r.ended_at for r in records)[:n]
    first = min(r.started_at for r in records)
    span = ends[-1] - first
    return {"jobs_per_s": len(ends) / span, "seconds": span}


def most_overlapping(records: list[Record]) -> int:
    """The most handler runs in progress at one moment (an end before a start at
    the same instant)."""
    events = sorted([(r.started_at, 1) for r in records] + [(r.ended_at, -1) for r in records])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def worst_window(starts: list[float], seconds: float) -> int:
    """The most of the sorted `starts` in any half-open window [t, t + seconds)."""
    most = first = 0
    for last, t in enumerate(starts):
        while starts[first] <= t - seconds:
            first += 1
        most = max(most, last - first + 1)
    return most


def steady_rate(starts: list[float], limit: int, seconds: float) -> tuple[float, float]:
    """The rate held, in starts per `seconds`: `limit` over the mean time from a
    start to the `limit`-th start after it (exactly `seconds` while the limit is
    reached; a window limit never lets it be less), over the starts after the
    first `limit` (the workers' start-up); and how many seconds that covers.
    Bursts and gaps between them count as they fall, wherever a window begins."""
    gaps = [starts[i + limit] - starts[i] for i in range(limit, len(starts) - limit)]
    if not gaps:
        return 0.0, 0.0
    return limit * seconds / statistics.fmean(gaps), starts[-1] - starts[limit]


def check_once(records: list[Record], expected: range) -> dict[str, Any]:
    seen = [r.i for r in records]
    unique = set(seen)
    return {
        "ran": len(seen),
        "duplicates": len(seen) - len(unique),
        "missing": len(set(expected) - unique),
    }


def run(args: argparse.Namespace, system: System, rec_dir: Path) -> dict[str, Any]:
    n = args.jobs
    deadline = time.monotonic() + args.cap
    out: dict[str, Any] = {"settings": system.settings(), "n": n}
    log = Path(args.log) if args.log else rec_dir / "workers.log"
    profile = Path(args.profile) if args.profile else None

    if args.workload == "enqueue":
        started = time.perf_counter()
        system.enqueue_each(0, n)
        seconds = time.perf_counter() - started
        out |= {"jobs_per_s": n / seconds, "seconds": seconds, "waiting": system.waiting()}
        return out

    if args.workload == "bulk":
        if not system.has_bulk:
            return out | {"skipped": "no bulk enqueue call"}
        started = time.perf_counter()
        system.enqueue_many(0, n)
        seconds = time.perf_counter() - started
        out |= {"jobs_per_s": n / seconds, "seconds": seconds, "waiting": system.waiting()}
        return out

    records = Records(rec_dir)

    if args.workload == "process":
        if args.features_on:  # untimed too: see features.py
            out["features_on"] = system.leave_features_behind()
        # Untimed: queue everything, then start the workers.
        if system.has_bulk:
            system.enqueue_many(0, n)
        else:
            system.enqueue_each(0, n)
        out["workers"] = args.workers
        workers = Workers(system, args.workers, log, profile)
        try:
            # CPU per job: from the first job on, so start-up does not count.
            wait_for(records, 1, deadline, workers)
            cpu_before, ran_before = workers.cpu_seconds(), records.poll()
            capped(records, n, deadline, workers)
            out["completed_in_store"] = wait_store(system, n, deadline)
            out["waiting"] = wait_drained(system, deadline)
            cpu = workers.cpu_seconds() - cpu_before
            out["worker_cpu_us_per_job"] = cpu / max(1, n - ran_before) * 1e6
        finally:
            workers.stop()
        records.poll()
        out |= throughput(records.records, n) | check_once(records.records, range(n))
        if args.kind_concurrency:
            out["kind_concurrency"] = args.kind_concurrency
            out["most_overlapping"] = most_overlapping(records.records)
        return out

    if args.workload == "rate":
        if not args.kind_rate:
            raise SystemExit("the rate workload needs --kind-rate")
        count, unit = args.kind_rate.split("/")
        period = {"s": 1.0, "m": 60.0, "h": 3600.0}[unit]
        system.enqueue_many(0, n)
        out["workers"] = args.workers
        workers = Workers(system, args.workers, log, profile)
        try:
            capped(records, n, deadline, workers)
            out["completed_in_store"] = wait_store(system, n, deadline)
            out["waiting"] = wait_drained(system, deadline)
        finally:
            workers.stop()
        records.poll()
        starts = system.attempt_starts()
        if starts is None:
            return out | {"skipped": "the store keeps no attempt start times"}
        mean, steady = steady_rate(starts, int(count), period)
        handler_starts = sorted(r.started_at for r in records.records)
        out |= throughput(records.records, n) | check_once(records.records, range(n))
        out |= {
            "kind_rate": args.kind_rate,
            "limit": int(count),
            "period_seconds": period,
            "attempts": len(starts),
            "mean_rate": mean,
            "steady_seconds": steady,
            "worst_window": worst_window(starts, period),
            # The same read from the handlers' clocks: a held-ahead job starts
            # its handler later than its attempt, so bursts may shift.
            "worst_window_handlers": worst_window(handler_starts, period),
        }
        return out

    if args.workload == "latency":
        workers = Workers(system, 1, log, profile)
        try:
            # Warm up (imports, connections, first claim), then let the worker go idle.
            system.enqueue_each(-5, 5)
            wait_for(records, 5, deadline, workers)
            time.sleep(2.0)
            system.enqueue_each(0, n, spacing=args.spacing)
            wait_for(records, n + 5, deadline, workers)
        finally:
            workers.stop()
        waits = sorted((r.started_at - r.enqueued_at) * 1000 for r in records.records if r.i >= 0)
        out |= {
            "median_ms": statistics.median(waits),
            "p99_ms": waits[min(len(waits) - 1, round(len(waits) * 0.99) - 1)],
            "max_ms": waits[-1],
            "spacing_ms": args.spacing * 1000,
        }
        return out

    if args.workload == "growth":
        started = time.perf_counter()
        system.seed(args.finished, n, analyze=args.analyze)
        out |= {
            "finished": args.finished,
            "analyze": args.analyze,
            "seed_seconds": time.perf_counter() - started,
        }
        workers = Workers(system, 1, log, profile)
        try:
            capped(records, args.measure, deadline, workers)
        finally:
            workers.stop()
        records.poll()
        out |= {"measured": args.measure} | throughput(records.records, args.measure)
        return out

    raise SystemExit(f"unknown workload {args.workload!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("system")
    parser.add_argument("workload")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--spacing", type=float, default=0.02)
    parser.add_argument("--finished", type=int, default=1_000_000)
    parser.add_argument("--measure", type=int, default=10_000)
    parser.add_argument("--analyze", action="store_true", help="growth: ANALYZE after seeding")
    parser.add_argument("--kind-concurrency", type=int, help="the no-op kind's concurrency")
    parser.add_argument("--kind-rate", help="the no-op kind's rate, N/s, N/m or N/h")
    parser.add_argument(
        "--features-on", action="store_true", help="process: with features.py's leavings"
    )
    parser.add_argument("--cap", type=float, default=120.0, help="seconds before giving up")
    parser.add_argument("--log", help="file for the workers' output")
    parser.add_argument("--profile", help="directory for py-spy profiles of the workers")
    args = parser.parse_args()

    # Read by the systems' task definitions, here and in the workers they start.
    if args.kind_concurrency:
        os.environ["BENCH_KIND_CONCURRENCY"] = str(args.kind_concurrency)
    if args.kind_rate:
        os.environ["BENCH_KIND_RATE"] = args.kind_rate
    with tempfile.TemporaryDirectory(prefix="bench-rec-") as tmp:
        os.environ["BENCH_RECORD_DIR"] = tmp
        system = load(args.system)
        try:
            system.setup()
            result = {"ok": True} | run(args, system, Path(tmp))
        except Timeout as e:
            result = {"ok": False, "error": str(e), "capped": True} | (e.partial or {})
        finally:
            system.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
