"""What a debounced enqueue costs against a plain one (issue 26): one at a
time, jobs per second on one database, for a plain `queue.enqueue`, a
debounced one whose key is new each time (a job stored, as a plain one, with
its key), and one whose key's job is still waiting (its payload and start
replaced: the debounce itself).

Not a test: prints figures; bounded in time. Also `make bench` step
`debounce` (bench/run.py): one database a run (--database-url, a fresh one each
time), the figures as a last JSON line (--json).

    .venv/bin/python bench/debounce_bench.py [--seconds 3] [--postgres URL]
        [--database-url URL] [--json]
"""

from __future__ import annotations

import time
from collections.abc import Callable

import chit
from aenqueue_bench import make_queue, run_script


def rate(enqueue: Callable[[int], object], seconds: float) -> float:
    enqueue(-1)  # the store opened
    n, started = 0, time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        enqueue(n)
        n += 1
    return n / (time.perf_counter() - started)


def measure(name: str, url: str, seconds: float) -> dict[str, float]:
    queue: chit.Queue = make_queue(url)
    try:
        plain = rate(lambda n: queue.enqueue("noop", {"n": n}), seconds)
        new_key = rate(
            lambda n: queue.enqueue("noop", {"n": n}, debounce_key=f"new:{n}", debounce=60),
            seconds,
        )
        same_key = rate(
            lambda n: queue.enqueue("noop", {"n": n}, debounce_key="same", debounce=60),
            seconds,
        )
    finally:
        queue.close()
    print(
        f"{name:<10} plain {plain:8,.0f} jobs/s   debounced, new key {new_key:8,.0f} "
        f"({new_key / plain:.2f}x)   debounced into a waiting job {same_key:8,.0f} "
        f"({same_key / plain:.2f}x)"
    )
    return {"jobs_per_s": plain, "new_key_per_s": new_key, "same_key_per_s": same_key}


def main() -> int:
    title = "enqueue one at a time: plain, debounced with a new key, debounced into a waiting job"
    return run_script(__doc__, title, measure)


if __name__ == "__main__":
    raise SystemExit(main())
