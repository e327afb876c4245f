"""The state machine's invariants as one query: the jobs that break one; and
the Redis store's indexes against its jobs."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

# The invariants PostgreSQL's CHECK constraints held until migration 024, which
# keeps one (SQLite keeps them all): every test of the store suite on
# PostgreSQL, and the fault run, end by looking for a job that breaks one.
BROKEN_INVARIANTS = """
SELECT id, state FROM chit_jobs WHERE NOT (
    state IN ('waiting', 'queued', 'running', 'succeeded', 'failed', 'cancelled')
    AND (state <> 'running' OR (lease_expires_at IS NOT NULL AND lease_token IS NOT NULL))
    AND (state = 'running' OR lease_token IS NULL)
    AND (state <> 'failed' OR error IS NOT NULL)
    AND run_on IN ('succeeded', 'finished')
    AND max_attempts > 0
)
"""


def redis_index_faults(client: Any, prefix: str) -> list[str]:
    """What the Redis store's indexes say that its job hashes do not: counts
    (P:cnt, P:qg:<queue>) and sets by state (P:bs:<state>), of running jobs
    (P:leases, P:rk:<kind>, P:run:<queue>) and of finished ones (P:fin:<state>,
    P:done). Every test of the store suite on Redis ends by asking."""
    P = prefix
    glob = re.sub(r"([*?\[\]\\])", r"\\\1", P)  # the prefix as itself in a MATCH pattern
    ids = [k[len(f"{P}:j:") :] for k in client.scan_iter(match=f"{glob}:j:*", count=1000)]
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(f"{P}:j:{job_id}", "state", "kind", "tenant", "queue", "g")
    jobs = dict(zip(ids, pipe.execute(), strict=True))
    faults: list[str] = []

    def same(key: str, want: Counter[str], got: Counter[str]) -> None:
        if want != got:
            faults.append(f"{key}: by the jobs {dict(want)}, by the index {dict(got)}")

    def ids_in(state: str, kind: str | None = None, queue: str | None = None) -> Counter[str]:
        return Counter(
            i
            for i, (s, k, _, q, _) in jobs.items()
            if s == state and kind in (None, k) and queue in (None, q)
        )

    def count_hash(key: str) -> Counter[str]:
        return Counter({f: int(n) for f, n in client.hgetall(key).items()})

    def zset(key: str) -> Counter[str]:
        return Counter(client.zrange(key, 0, -1))

    counts = Counter(f"{s}\0{k}\0{t}" for s, k, t, _, _ in jobs.values())
    same(f"{P}:cnt", counts, count_hash(f"{P}:cnt"))
    indexed = {k[len(f"{P}:bs:") :] for k in client.scan_iter(match=f"{glob}:bs:*")}
    for state in {j[0] for j in jobs.values()} | indexed:
        same(f"{P}:bs:{state}", ids_in(state), zset(f"{P}:bs:{state}"))
    same(f"{P}:leases", ids_in("running"), zset(f"{P}:leases"))
    for kind in {j[1] for j in jobs.values()}:
        same(f"{P}:rk:{kind}", ids_in("running", kind=kind), zset(f"{P}:rk:{kind}"))
    for queue in {j[3] for j in jobs.values()}:
        running = Counter(client.smembers(f"{P}:run:{queue}"))
        same(f"{P}:run:{queue}", ids_in("running", queue=queue), running)
        groups = Counter(g for s, _, _, q, g in jobs.values() if s == "queued" and q == queue)
        same(f"{P}:qg:{queue}", groups, count_hash(f"{P}:qg:{queue}"))
    for state, key in (("succeeded", "fin:succeeded"), ("failed", "fin:failed")):
        same(f"{P}:{key}", ids_in(state), zset(f"{P}:{key}"))
    same(f"{P}:done", ids_in("cancelled"), zset(f"{P}:done"))
    return faults
