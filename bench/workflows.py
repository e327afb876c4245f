"""Workflows (issue 14): chit's fan-in and chain on SQLite and PostgreSQL, and
Celery's chord on the same fan-in, in one run.

    bench/.venv-peers/bin/python bench/workflows.py [--jobs 10000] [--chain 1000]
        [--systems chit-sqlite,chit-postgres,celery] [--repeat 1]

Also `make bench` step `workflows` (bench/run.py). Each measurement starts
from a fresh store (a new SQLite file, a new PostgreSQL database, a flushed
Redis): the jobs are stored first, in one call, timed; then two worker
processes start (`chit worker --concurrency 8` each; Celery: `celery worker
--pool threads -c 8` each, as systems/celery_redis.py) and the run ends when
every handler has recorded its end (recorder.py). Rates are counted from the
first handler start to the last handler end: the callback's, for a fan-in.

- fan-in: N `leaf` jobs and one `callback` that depends on all of them, one
  `Queue.enqueue_workflow`; against `plain`, the same N leaves with no
  dependencies in one `enqueue_many`. The issue asks the fan-in to keep at least
  80 % of the plain rate.
- chain: `--chain` jobs, each depending on the one before, one
  `enqueue_workflow`; a hop is the next job's `started_at` minus this one's
  `finished_at`, read from the job rows (SQLite stores milliseconds), and the
  same from the handlers' clocks (next start minus this end). The issue asks a
  median below 10 ms.
- Celery: `chord(leaf.s(i) for i in range(N))(callback.s())`, Redis broker and
  result backend (a chord's header must store its results); against the same
  N leaves sent one `apply_async` at a time with results ignored, as
  systems/celery_redis.py runs them.

The apps: workflows_chit.py (from the project's .venv) and workflows_celery.py
(from bench/.venv-peers). run.py --baseline REF adds `chit-sqlite@REF` and
`chit-postgres@REF`: the same, with REF's src first on PYTHONPATH (`paths`).
"""

from __future__ import annotations

import argparse
import itertools
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
ROOT = HERE.parent
CHIT_PYTHON = ROOT / ".venv/bin/python"
PEERS_PYTHON = HERE / ".venv-peers/bin/python"

SYSTEMS = ("chit-sqlite", "chit-postgres", "celery")
WORKERS = 2
CONCURRENCY = 8
CAP_SECONDS = 300.0
FAN_IN_FLOOR = 0.80  # issue 14: the fan-in's rate against the plain jobs'
HOP_CEILING_MS = 10.0  # issue 14: the chain's median hop


def worker_commands(system: str) -> list[list[str]]:
    if system.startswith("chit"):
        cmd = [str(CHIT_PYTHON), "-m", "chit", "worker", "--app", "workflows_chit:queue",
               "--concurrency", str(CONCURRENCY), "--log-level", "WARNING"]  # fmt: skip
        return [cmd] * WORKERS
    celery = [str(PEERS_PYTHON.parent / "celery"), "-A", "workflows_celery", "worker",
              "--pool", "threads", "-c", str(CONCURRENCY), "--loglevel", "WARNING",
              "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip
    return [[*celery, "-n", f"wf{n}@%h"] for n in range(WORKERS)]


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


class Measure:
    """One measurement: a fresh store, the jobs stored, the workers run to the end."""

    def __init__(self, system: str, folder: Path, env: dict[str, str]) -> None:
        folder.mkdir(parents=True)
        self.system, self.folder = system, folder
        self.env = env | {"BENCH_RECORD_DIR": str(folder)}
        self.ids = folder / "ids.json"

    def app(self, *args: str) -> dict[str, Any]:
        if self.system.startswith("chit"):
            cmd = [str(CHIT_PYTHON), str(HERE / "workflows_chit.py"), *args, str(self.ids)]
        else:
            cmd = [str(PEERS_PYTHON), str(HERE / "workflows_celery.py"), *args]
        done = subprocess.run(
            cmd, env=self.env, cwd=HERE, capture_output=True, text=True, timeout=CAP_SECONDS
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited with {done.returncode}: {done.stderr}")
        out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return out

    def work(self, jobs: int) -> list[Any]:
        """Start the workers; stop them once `jobs` handlers have recorded their end."""
        from recorder import Records

        records = Records(self.folder)
        procs = []
        with open(self.folder / "workers.log", "wb") as log:
            try:
                for cmd in worker_commands(self.system):
                    procs.append(
                        subprocess.Popen(cmd, env=self.env, cwd=HERE, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
                    )  # fmt: skip
                deadline = time.monotonic() + CAP_SECONDS
                while records.poll() < jobs:
                    if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                        raise RuntimeError(
                            f"{self.system}: {len(records.records)} of {jobs} jobs ran; "
                            f"see {self.folder / 'workers.log'}"
                        )
                    time.sleep(0.05)
            finally:
                for p in procs:
                    os.killpg(p.pid, signal.SIGTERM)
                for p in procs:
                    try:
                        p.wait(30)
                    except subprocess.TimeoutExpired:
                        os.killpg(p.pid, signal.SIGKILL)
                        p.wait()
        ran = records.records
        if len({r.i for r in ran}) != jobs or len(ran) != jobs:
            raise RuntimeError(f"{self.system}: {len(ran)} runs of {jobs} jobs, not once each")
        return sorted(ran, key=lambda r: r.i)


def rate(ran: list[Any]) -> float:
    return len(ran) / (max(r.ended_at for r in ran) - min(r.started_at for r in ran))


def fan(system: str, shape: str, n: int, folder: Path, env: dict[str, str]) -> dict[str, Any]:
    """`plain` or `fanin` (chit), `plain` or `chord` (Celery): stored, then run."""
    m = Measure(system, folder, env)
    stored = m.app("store", shape, str(n))
    ran = m.work(stored["jobs"])
    out = {"store_seconds": stored["seconds"], "jobs": stored["jobs"], "jobs_per_s": rate(ran)}
    out["total_seconds"] = stored["seconds"] + stored["jobs"] / out["jobs_per_s"]
    if shape != "plain":
        callback, leaves = ran[-1], ran[:-1]
        late = max(r.ended_at for r in leaves)
        if callback.started_at < late:
            raise RuntimeError(f"{system}: the callback started before the last leaf ended")
        # From the last leaf's end to the callback's start, by the handlers' clocks.
        out["release_ms"] = (callback.started_at - late) * 1000
    return out


def chain(system: str, n: int, folder: Path, env: dict[str, str]) -> dict[str, Any]:
    m = Measure(system, folder, env)
    stored = m.app("store", "chain", str(n))
    ran = m.work(n)
    gaps = [(b.started_at - a.ended_at) * 1000 for a, b in itertools.pairwise(ran)]
    if min(gaps) < 0:
        raise RuntimeError(f"{system}: a chain job started before the one before it ended")
    rows = subprocess.run(
        [str(CHIT_PYTHON), str(HERE / "workflows_chit.py"), "hops", str(m.ids)],
        env=m.env, cwd=HERE, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return {
        "store_seconds": stored["seconds"],
        "jobs": n,
        "rows": json.loads(rows),
        "handlers": {
            "median_ms": statistics.median(gaps),
            "p90_ms": quantile(gaps, 0.9),
            "max_ms": max(gaps),
        },
        "seconds": ran[-1].ended_at - ran[0].started_at,
    }


def versions(pg_version: str, redis_version: str) -> dict[str, str]:
    probe = (
        "import json, platform, sqlite3, sys; from importlib import metadata as m; "
        "v = {p: m.version(p) for p in sys.argv[1:]}; v['python'] = platform.python_version(); "
        "v['sqlite'] = sqlite3.sqlite_version; print(json.dumps(v))"
    )
    out: dict[str, str] = {}
    for python, packages in ((CHIT_PYTHON, ["chit", "psycopg"]), (PEERS_PYTHON, ["celery"])):
        found = json.loads(
            subprocess.run([str(python), "-c", probe, *packages], capture_output=True,
                           text=True, check=True).stdout
        )  # fmt: skip
        if python == PEERS_PYTHON:
            found.pop("sqlite")
            found["python (celery)"] = found.pop("python")
        out |= found
    return out | {"postgresql": pg_version, "redis": redis_version}


def run(
    directory: Path,
    pg: Any,
    redis: Any,
    systems: list[str],
    jobs: int = 10_000,
    chain_jobs: int = 1_000,
    repeat: int = 1,
    paths: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Every system named (chit-sqlite, chit-postgres, celery, or one of the
    first two from another src as `chit-sqlite@REF`), taking turns, printed as
    it comes; the best of `repeat` runs of each measurement, and the versions.
    `paths`: the PYTHONPATH of a system's processes (bench/ when not given).
    A system that fails is said so, and the others go on."""
    for python in (CHIT_PYTHON, PEERS_PYTHON):
        if not python.exists():
            raise SystemExit(f"{python} is missing: run `make bench`")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CHIT_", "BENCH_"))}
    info = versions(pg.version if pg else "-", redis.version() if redis else "-")
    print("workflows: " + ", ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    figures: dict[str, dict[str, Any]] = {s: {} for s in systems}

    def store_env(system: str, name: str) -> dict[str, str]:
        env = base | {"PYTHONPATH": (paths or {}).get(system, str(HERE))}
        if system.startswith("chit-sqlite"):
            return env | {"CHIT_DATABASE_URL": f"sqlite:///{directory / name}.db"}
        if system.startswith("chit-postgres"):
            return env | {"CHIT_DATABASE_URL": pg.fresh(name)}
        redis.flush()
        return env | {"BENCH_REDIS_URL": redis.url}

    def measure(system: str, shape: str, rep: int) -> dict[str, Any]:
        """One measurement in a fresh store, dropped after."""
        name, folder = f"bench_wf_{shape}", directory / f"wf-{system}-{shape}-{rep}"
        try:
            if shape == "chain":
                return chain(system, chain_jobs, folder, store_env(system, name))
            return fan(system, shape, jobs, folder, store_env(system, name))
        finally:
            cleanup(system, pg, directory, name)

    def keep(system: str, key: str, result: dict[str, Any], better: str) -> None:
        old = figures[system].get(key)
        if old is None or (result[better] > old[better]) == (better == "jobs_per_s"):
            figures[system][key] = result

    for rep in range(repeat):
        for system in systems[rep % len(systems) :] + systems[: rep % len(systems)]:
            shapes = ("plain", "fanin") if system.startswith("chit") else ("plain", "chord")
            try:
                for shape in shapes if rep % 2 == 0 else shapes[::-1]:
                    result = measure(system, shape, rep)
                    keep(system, shape, result, "jobs_per_s")
                    print(f"  {system:14} {shape:6} stored {result['jobs']:,} in "
                          f"{result['store_seconds']:6.2f} s, {result['jobs_per_s']:7,.0f} jobs/s"
                          + (f", callback {result['release_ms']:.1f} ms after the last leaf"
                             if "release_ms" in result else ""), flush=True)  # fmt: skip
                if system.startswith("chit"):
                    result = measure(system, "chain", rep)
                    result["median_ms"] = result["rows"]["median_ms"]
                    # The best by the handlers' clocks: SQLite's rows keep milliseconds.
                    result["hop_ms"] = result["handlers"]["median_ms"]
                    keep(system, "chain", result, "hop_ms")
                    print(f"  {system:14} chain  {chain_jobs:,} hops: median "
                          f"{result['rows']['median_ms']:.2f} ms, p90 "
                          f"{result['rows']['p90_ms']:.2f} ms (rows); handlers "
                          f"{result['handlers']['median_ms']:.2f} / "
                          f"{result['handlers']['p90_ms']:.2f} ms", flush=True)  # fmt: skip
            except (RuntimeError, subprocess.SubprocessError) as e:
                print(f"  {system:14} FAILED: {e}", flush=True)
    summary = {"jobs": jobs, "chain": chain_jobs, "workers": WORKERS,
               "concurrency": CONCURRENCY, "figures": figures, "versions": info}  # fmt: skip
    text = markdown(summary)
    (directory / "workflows.md").write_text(text)
    print(text, flush=True)
    return summary


def cleanup(system: str, pg: Any, directory: Path, name: str) -> None:
    if system.startswith("chit-postgres"):
        pg.drop(name)
    for suffix in (".db", ".db-wal", ".db-shm"):
        Path(f"{directory / name}{suffix}").unlink(missing_ok=True)


def markdown(summary: dict[str, Any]) -> str:
    n, figures = summary["jobs"], summary["figures"]
    rows = [
        f"Fan-in: {n:,} jobs and one callback, stored in one call; {summary['workers']} "
        f"worker processes of {summary['concurrency']} slots.",
        "",
        "| system | fan-in stored (s) | fan-in jobs/s | plain jobs/s | fan-in / plain "
        "| callback after last leaf | total (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for system, f in figures.items():
        joined = f.get("fanin") or f.get("chord")
        plain = f.get("plain")
        if not joined or not plain:
            continue
        ratio = joined["jobs_per_s"] / plain["jobs_per_s"]
        mark = "" if system == "celery" else (" ✓" if ratio >= FAN_IN_FLOOR else " ✗")
        rows.append(
            f"| {system}{' (chord)' if system == 'celery' else ''} "
            f"| {joined['store_seconds']:.2f} | {joined['jobs_per_s']:,.0f} "
            f"| {plain['jobs_per_s']:,.0f} | {ratio:.0%}{mark} | {joined['release_ms']:.1f} ms "
            f"| {joined['total_seconds']:.1f} |"
        )
    chains = {s: f["chain"] for s, f in figures.items() if "chain" in f}
    if chains:
        rows += [
            "",
            f"Chain: {summary['chain']:,} jobs, each depending on the one before; a hop is "
            "the next job's start minus this one's end.",
            "",
            "| system | stored (s) | median hop (rows) | p90 (rows) | median hop (handlers) "
            "| p90 (handlers) | whole chain (s) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for system, c in chains.items():
            r, h = c["rows"], c["handlers"]
            mark = " ✓" if r["median_ms"] < HOP_CEILING_MS else " ✗"
            rows.append(
                f"| {system} | {c['store_seconds']:.2f} | {r['median_ms']:.2f} ms{mark} "
                f"| {r['p90_ms']:.2f} ms | {h['median_ms']:.2f} ms | {h['p90_ms']:.2f} ms "
                f"| {c['seconds']:.1f} |"
            )
    v = summary["versions"]
    rows += [
        "",
        f"Versions: chit {v.get('chit')}, Python {v.get('python')}, SQLite {v.get('sqlite')}, "
        f"PostgreSQL {v.get('postgresql')}, psycopg {v.get('psycopg')}; Celery "
        f"{v.get('celery')} on Python {v.get('python (celery)')}, Redis {v.get('redis')}.",
    ]
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10_000, help="fan-in leaves (10000)")
    parser.add_argument("--chain", type=int, default=1_000, help="chain jobs (1000)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each (1); the best counts")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import services

    systems = args.systems.split(",")
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}; known: {', '.join(SYSTEMS)}")
    pg = services.Postgres() if "chit-postgres" in systems else None
    with tempfile.TemporaryDirectory(prefix="chit-workflows-") as tmp:
        redis = services.Redis(Path(tmp) / "redis.log") if "celery" in systems else None
        try:
            run(Path(tmp), pg, redis, systems, args.jobs, args.chain, args.repeat)
        finally:
            if redis is not None:
                redis.stop()
            if pg is not None:
                pg.drop_all()


if __name__ == "__main__":
    main()
