"""HTTP API benchmark: submits per second and status polls per second against
one `chit serve` process (uvicorn; the handlers of bench/noop_app.py) on a
SQLite file, or on PostgreSQL with --database-url.

Not a test: prints figures and the versions they were measured with. The load
generator (this process: raw HTTP/1.1 keep-alive connections on asyncio)
shares the machine with the server, so the figures are a floor for the server
alone; the load average printed says how busy the machine was. Loopback only; every phase is
bounded in time. Also `make bench` step `api-submit` (bench/run.py): `--only
"POST /jobs ("` on a fresh database each run, the server's chit from the tree
or from `git archive REF` (PYTHONPATH), the figures as a last JSON line (--json).

    .venv/bin/python bench/api_bench.py [--seconds 5] [--concurrency 16]
        [--database-url URL] [--only PHASE] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx

KEY = "bench-key-0123456789abcdef"
HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Connection:
    """A minimal HTTP/1.1 keep-alive client on asyncio streams: far cheaper per
    request than a full client, so the figures measure the server more than us."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}", f"Authorization: Bearer {KEY}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if body:
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        answer = {}
        for line in header_lines:
            if ":" in line:
                name, value = line.split(":", 1)
                answer[name.strip().lower()] = value.strip()
        length = int(answer.get("content-length", "0"))
        content = await self.reader.readexactly(length) if length else b""
        return int(status_line.split()[1]), answer, content


Request = Callable[[Connection, int], Awaitable[tuple[int, dict[str, str], bytes]]]


async def phase(
    name: str, url: tuple[str, int], seconds: float, concurrency: int, request: Request, expect: int
) -> dict[str, Any]:
    """Run `request` on `concurrency` connections for `seconds`; print rate and
    latency, and return them (the rate counts the answers `expect`ed only)."""
    latencies: list[float] = []
    failures = 0
    deadline = time.perf_counter() + seconds
    counter = iter(range(10**9))

    async def loop() -> None:
        nonlocal failures
        conn = Connection(*url)
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            status, _, _ = await request(conn, next(counter))
            latencies.append(time.perf_counter() - started)
            if status != expect:
                failures += 1
        if conn.writer is not None:
            conn.writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    ms = sorted(x * 1000 for x in latencies)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(
        f"{name:<36} {len(ms) / elapsed:7.0f} req/s   p50 {statistics.median(ms):6.1f} ms"
        f"   p99 {p99:6.1f} ms   ({len(ms)} requests, {failures} unexpected)"
    )
    return {
        "phase": name,
        "jobs_per_s": (len(ms) - failures) / elapsed,
        "p50_ms": statistics.median(ms),
        "p99_ms": p99,
        "requests": len(ms),
        "unexpected": failures,
        "concurrency": concurrency,
    }


async def run(
    url: tuple[str, int], seconds: float, concurrency: int, only: str | None = None
) -> list[dict[str, Any]]:
    ids: list[str] = []

    async def submit(conn: Connection, n: int) -> tuple[int, dict[str, str], bytes]:
        body = json.dumps({"kind": "noop", "payload": {"i": n}}).encode()
        answer = await conn.request("POST", "/jobs", body)
        if len(ids) < 5000 and answer[0] == 202:
            ids.append(json.loads(answer[2])["job_id"])
        return answer

    async def submit_idempotent(conn: Connection, n: int) -> tuple[int, dict[str, str], bytes]:
        body = json.dumps({"kind": "noop", "payload": {"i": n}}).encode()
        return await conn.request("POST", "/jobs", body, {"Idempotency-Key": f"bench-{n}"})

    async def poll(conn: Connection, n: int) -> tuple[int, dict[str, str], bytes]:
        return await conn.request("GET", f"/jobs/{random.choice(ids)}")

    etags: dict[str, str] = {}
    figures = []

    async def poll_conditional(conn: Connection, n: int) -> tuple[int, dict[str, str], bytes]:
        job_id = random.choice(ids[:200])
        tag = etags.get(job_id)
        answer = await conn.request(
            "GET", f"/jobs/{job_id}", headers={"If-None-Match": tag} if tag else None
        )
        if answer[0] == 200:
            etags[job_id] = answer[1]["etag"]
            return 304, answer[1], b""  # first sight of this job: expected
        return answer

    async def health(conn: Connection, n: int) -> tuple[int, dict[str, str], bytes]:
        return await conn.request("GET", "/healthz")

    for name, request, expect in (
        ("GET /healthz (framework floor)", health, 200),
        ("POST /jobs (submit)", submit, 202),
        ("POST /jobs with Idempotency-Key", submit_idempotent, 202),
        ("GET /jobs/{id} (status poll)", poll, 200),
        ("GET /jobs/{id} If-None-Match (304)", poll_conditional, 304),
    ):
        if only is None or name.startswith(only):
            figures.append(await phase(name, url, seconds, concurrency, request, expect))
    return figures


def versions() -> str:
    names = ["fastapi", "starlette", "uvicorn", "pydantic", "httpx", "chit"]
    found = ", ".join(f"{n} {metadata.version(n)}" for n in names)
    return (
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, {found}; "
        f"{os.cpu_count()} CPUs, {platform.machine()}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per phase (default 5)")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight")
    parser.add_argument(
        "--database-url", help="a PostgreSQL URL to serve from (default: a temporary SQLite file)"
    )
    parser.add_argument("--only", help="run only the phases whose name starts with this")
    parser.add_argument("--json", action="store_true", help="the last phase as a JSON line")
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        database = args.database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        env = os.environ | {"CHIT_DATABASE_URL": database, "CHIT_API_KEYS": KEY}
        # `chit serve` from whichever chit PYTHONPATH names (run.py's --baseline);
        # its output kept off stdout, which ends with the figures.
        serve = [sys.executable, "-m", "chit", "serve", "--app", "noop_app:queue",
                 "--port", str(port), "--log-level", "WARNING"]  # fmt: skip
        server = subprocess.Popen(serve, env=env, cwd=HERE, stdout=sys.stderr)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    print("the API server did not start", file=sys.stderr)
                    return 1
                time.sleep(0.1)
            where = "PostgreSQL" if database.startswith("postgres") else "SQLite"
            print(f"chit HTTP API: one `chit serve`, {where}, {args.concurrency} in flight")
            print(versions())
            print(f"load average before: {os.getloadavg()[0]:.2f}")
            figures = asyncio.run(
                run(("127.0.0.1", port), args.seconds, args.concurrency, args.only)
            )
        finally:
            server.terminate()
            server.wait(timeout=15)
    if args.json and figures:
        last = figures[-1]
        ok = last["unexpected"] == 0
        error = "" if ok else f"{last['unexpected']} of {last['requests']} answers unexpected"
        print(json.dumps({"ok": ok, "error": error, **last, "versions": versions()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
