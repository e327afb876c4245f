"""`job.emit` to an SSE client (issue 25): how long a value takes from the
handler's `emit` to a client of `GET /jobs/{id}/events`, over real processes
on each store: one `chit serve` and one `chit worker` (bench/output_app.py),
the client in this process. Each value carries the wall-clock time it was
emitted; the client notes when its `output` event arrived (one machine, one
clock). Values come `--every` seconds apart, so most find no write under way
(the latency of a quiet stream); `--every 0` emits as fast as the handler
can (a busy one, batched).

Not a test: prints the median, p90, p99 and max per store. Bounded in time.
Also `make bench` step `output` (bench/run.py): one database a run
(--database-url, a fresh one each time), the figures as a last JSON line
(--json).

    .venv/bin/python bench/output_bench.py [--count 300] [--every 0.01]
        [--stores sqlite,postgres,redis] [--postgres URL] [--database-url URL] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psycopg

from chit.client import SSEParser
from services import Redis, free_port

HERE = Path(__file__).resolve().parent
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def fresh_postgres(admin: str) -> tuple[str, str]:
    name = f"bench_output_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin.rsplit("/", 1)[0] + "/" + name, name


def drop_postgres(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def measure(database: str, count: int, every: float) -> list[float]:
    """Latencies (seconds) of one streamed job's values on `database`."""
    port = free_port()
    env = os.environ | {"CHIT_DATABASE_URL": database, "PYTHONPATH": str(HERE)}
    subprocess.run([sys.executable, "-m", "chit", "migrate"], env=env, check=True, cwd=HERE)
    serve = [sys.executable, "-m", "chit", "serve", "--app", "output_app:queue",
             "--port", str(port), "--log-level", "WARNING"]  # fmt: skip
    work = [sys.executable, "-m", "chit", "worker", "--app", "output_app:queue",
            "--concurrency", "2"]  # fmt: skip
    procs = [subprocess.Popen(cmd, env=env, cwd=HERE, stdout=sys.stderr) for cmd in (serve, work)]
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the API server did not start")
            time.sleep(0.1)
        with httpx.Client(base_url=url, timeout=httpx.Timeout(None)) as http:
            posted = http.post(
                "/jobs", json={"kind": "emitter", "payload": {"count": count, "every": every}}
            )
            job_id = posted.json()["job_id"]
            latencies: list[float] = []
            parser = SSEParser()
            with http.stream("GET", f"/jobs/{job_id}/events") as stream:
                for line in stream.iter_lines():
                    event = parser.feed(line)
                    if event is not None and event.event == "output":
                        arrived = time.time()
                        latencies.append(arrived - json.loads(event.data)["data"]["t"])
        return latencies
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(15)


def summary(latencies: list[float]) -> dict[str, float]:
    ms = sorted(x * 1000 for x in latencies)
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return {"n": len(ms), "median_ms": statistics.median(ms), "p90_ms": q[89],
            "p99_ms": q[98], "max_ms": ms[-1]}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=300, help="values emitted (default 300)")
    parser.add_argument("--every", type=float, default=0.01, help="seconds between values")
    parser.add_argument("--stores", default="sqlite,postgres,redis")
    parser.add_argument("--postgres", default=PG_ADMIN, help="a server's admin database URL")
    parser.add_argument("--database-url", help="measure only this (fresh) database")
    parser.add_argument("--json", action="store_true", help="the figures as a last JSON line")
    args = parser.parse_args()
    if args.database_url:
        one = summary(measure(args.database_url, args.count, args.every))
        print(f"{args.database_url.split(':', 1)[0]}: {one}")
        if args.json:
            print(json.dumps({"ok": True, **one}))
        return 0
    print(f"emit -> SSE client: {args.count} values, {args.every} s apart, one job")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    figures: dict[str, dict[str, float]] = {}
    for store in args.stores.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            if store == "sqlite":
                lat = measure(f"sqlite:///{Path(tmp) / 'bench.db'}", args.count, args.every)
            elif store == "postgres":
                url, name = fresh_postgres(args.postgres)
                try:
                    lat = measure(url, args.count, args.every)
                finally:
                    drop_postgres(args.postgres, name)
            elif store == "redis":
                redis = Redis(Path(tmp) / "redis.log")
                try:
                    lat = measure(redis.url, args.count, args.every)
                finally:
                    redis.stop()
            else:
                raise SystemExit(f"unknown store {store!r}")
        figures[store] = s = summary(lat)
        print(
            f"{store:<9} n={s['n']:<5} median {s['median_ms']:6.1f} ms   p90 {s['p90_ms']:6.1f} ms"
            f"   p99 {s['p99_ms']:6.1f} ms   max {s['max_ms']:6.1f} ms"
        )
    if args.json:
        print(json.dumps({"ok": True, **figures}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
