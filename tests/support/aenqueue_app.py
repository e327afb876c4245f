"""A FastAPI app of the kind users write, for the aenqueue test under real
uvicorn: POST /burst enqueues `n` jobs from `n` concurrent coroutines with
`queue.aenqueue` while a ticker task measures how late the event loop wakes it:
the lag as the clock shows it, and the lag less the time the OS kept the thread
waiting for a CPU (the machine is shared: what the loop itself caused)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

import chit

queue = chit.Queue()  # CHIT_DATABASE_URL from the environment
TICK = 0.002


def run_delay() -> float:
    """Seconds this thread has spent runnable but waiting for a CPU (Linux's
    schedstat): lag the machine's other processes caused, not this loop."""
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


@queue.task("noop")
def noop(job: chit.JobContext, body: dict[str, Any]) -> None:
    return None


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    await queue.aclose()


app = FastAPI(lifespan=lifespan)


@app.post("/burst")
async def burst(n: int = 100) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    lags: list[float] = []
    own: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            before, waited = loop.time(), run_delay()
            await asyncio.sleep(TICK)
            lag = loop.time() - before - TICK
            lags.append(lag)
            own.append(lag - (run_delay() - waited))

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(TICK)  # the ticker runs before the first enqueue
    started = time.monotonic()
    results = await asyncio.gather(*(queue.aenqueue("noop", {"i": i}) for i in range(n)))
    seconds = time.monotonic() - started
    done.set()
    await ticking
    return {
        "ids": [r.id for r in results],
        "max_lag_ms": max(lags) * 1000,
        "max_own_lag_ms": max(own) * 1000,
        "ticks": len(lags),
        "seconds": seconds,
    }
