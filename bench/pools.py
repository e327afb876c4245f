"""`chit worker --pool process` against Celery's prefork pool (`-P prefork -c 2`):
two child processes each, on no-op jobs and on 10 ms CPU-bound jobs.

    bench/.venv-peers/bin/python bench/pools.py [--jobs 2000] [--repeat 2]

Also `make bench` step `pools` (bench/run.py). Each run queues every job first
(untimed) in a fresh store (a new SQLite file for chit, a flushed Redis for
Celery), then starts one worker with two children; jobs/s is counted from the
first handler start to the last handler end (recorder.py, the clock of the
other benchmarks). The systems take turns; the best of `--repeat` runs counts.
chit runs from the project's .venv, Celery from bench/.venv-peers. The apps:
pools_chit.py and pools_celery.py, configured as systems/chit_sqlite.py and
systems/celery_redis.py are (Celery: Redis broker, results ignored, prefetch
multiplier 64).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
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

CPU_SECONDS = 0.010
CHILDREN = 2
WORKLOADS = {"noop": "no-op", "cpu": "10 ms CPU"}
SYSTEMS = ("chit", "celery")
CAP_SECONDS = 300.0


def spin(seconds: float) -> None:
    """Burn `seconds` of this thread's CPU time, however busy the machine is."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def worker_command(system: str) -> list[str]:
    if system == "chit":
        return [str(CHIT_PYTHON), "-m", "chit", "worker", "--app", "pools_chit:queue",
                "--pool", "process", "--concurrency", str(CHILDREN),
                "--log-level", "WARNING"]  # fmt: skip
    return [str(PEERS_PYTHON.parent / "celery"), "-A", "pools_celery", "worker",
            "-P", "prefork", "-c", str(CHILDREN), "--loglevel", "WARNING",
            "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip


def measure(system: str, workload: str, jobs: int, folder: Path, redis_url: str) -> float:
    """One run: queue `jobs`, start the worker, wait for every handler; jobs/s."""
    from recorder import Records

    folder.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHIT_", "BENCH_"))}
    env |= {"PYTHONPATH": str(HERE), "BENCH_RECORD_DIR": str(folder)}
    env |= {"CHIT_DATABASE_URL": f"sqlite:///{folder / 'chit.db'}", "BENCH_REDIS_URL": redis_url}
    python, app = (
        (CHIT_PYTHON, "pools_chit.py") if system == "chit" else (PEERS_PYTHON, "pools_celery.py")
    )
    subprocess.run(
        [str(python), str(HERE / app), workload, str(jobs)], env=env, check=True, cwd=HERE
    )
    with open(folder / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            worker_command(system),
            env=env,
            cwd=HERE,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            records = Records(folder)
            deadline = time.monotonic() + CAP_SECONDS
            while records.poll() < jobs:
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{system} {workload}: {len(records.records)} of {jobs} jobs ran; "
                        f"see {folder / 'worker.log'}"
                    )
                time.sleep(0.05)
        finally:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
    ran = records.records
    if len({r.i for r in ran}) != jobs:
        raise RuntimeError(f"{system} {workload}: {len(ran)} runs of {jobs} jobs, not once each")
    span = max(r.ended_at for r in ran) - min(r.started_at for r in ran)
    return jobs / span


def versions() -> dict[str, str]:
    """The packages measured and the Python each venv runs."""
    probe = (
        "import json, platform, sys; from importlib import metadata as m; "
        "v = {p: m.version(p) for p in sys.argv[1:]}; v['python'] = platform.python_version(); "
        "print(json.dumps(v))"
    )
    out: dict[str, str] = {}
    for python, packages in ((CHIT_PYTHON, ["chit"]), (PEERS_PYTHON, ["celery", "billiard"])):
        done = subprocess.run(
            [str(python), "-c", probe, *packages], capture_output=True, text=True, check=True
        )
        found = json.loads(done.stdout)
        found[f"python ({packages[0]})"] = found.pop("python")
        out |= found
    return out


def run(directory: Path, jobs: int, repeat: int = 2) -> dict[str, Any]:
    """Every system on every workload, taking turns, printed as they come; the
    best jobs/s of each and the versions measured."""
    import services

    for python in (CHIT_PYTHON, PEERS_PYTHON):
        if not python.exists():
            raise SystemExit(f"{python} is missing: run `make bench`")
    redis = services.Redis(directory / "pools-redis.log")
    best: dict[str, dict[str, float]] = {w: {} for w in WORKLOADS}
    try:
        info = versions() | {"redis": redis.version(), "cores": str(os.cpu_count())}
        about = ", ".join(f"{k} {v}" for k, v in info.items())
        print(f"pools: {jobs} jobs a run, {CHILDREN} children a worker; {about}", flush=True)
        for workload in WORKLOADS:
            for rep in range(repeat):
                for system in SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]:
                    redis.flush()
                    folder = directory / f"pools-{system}-{workload}-{rep}"
                    rate = measure(system, workload, jobs, folder, redis.url)
                    best[workload][system] = max(rate, best[workload].get(system, 0.0))
                    name = WORKLOADS[workload]
                    print(f"  {system:6} {name:9} run {rep + 1}: {rate:7.0f} jobs/s", flush=True)
    finally:
        redis.stop()
    print(f"{'jobs/s (best)':14} {'chit --pool process':>20} {'Celery prefork':>15} {'ratio':>6}")
    for workload, figures in best.items():
        ratio = figures["chit"] / figures["celery"]
        chit, celery = figures["chit"], figures["celery"]
        print(f"{WORKLOADS[workload]:14} {chit:20.0f} {celery:15.0f} {ratio:6.2f}")
    return {"jobs": jobs, "children": CHILDREN, "best": best, "versions": info}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=2000, help="jobs a run (default 2000)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each (default 2)")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    with tempfile.TemporaryDirectory(prefix="chit-pools-") as tmp:
        run(Path(tmp), args.jobs, args.repeat)


if __name__ == "__main__":
    main()
