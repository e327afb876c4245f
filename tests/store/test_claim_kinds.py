"""A worker claims only the kinds it has code for (Store.claim's and
finish_and_claim's `kinds`), on every backend and on every claim path: the
one statement, a busy worker's finish-and-claim, and the flow claim that
limits and pauses send claims through. Other kinds' jobs stay queued for the
workers that run them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chit.jobs import NewJob, State, Succeeded
from chit.limits import Limits
from chit.store.capabilities import FullStore

LEASE = 30.0


def mixed(store: FullStore, n: int = 3) -> dict[str, list[str]]:
    """n jobs of each of "ours" and "theirs", interleaved, "theirs" first in line."""
    ids: dict[str, list[str]] = {"ours": [], "theirs": []}
    at = datetime.now(UTC) - timedelta(seconds=60)
    for i in range(n):
        for kind in ("theirs", "ours"):
            job = NewJob(kind, {"i": i}, run_at=at + timedelta(seconds=i))
            ids[kind].append(store.enqueue(job).id)
    return ids


@pytest.mark.parametrize("flow", ["plain", "limited", "paused-other"])
def test_a_claim_takes_only_the_kinds_it_names(store: FullStore, flow: str) -> None:
    if flow == "limited":  # claims go through the flow claim
        store.set_limits("ours", Limits.checked(concurrency=100))
    if flow == "paused-other":
        store.pause(kind="elsewhere")
    ids = mixed(store)
    claimed = store.claim("w", ["default"], 10, LEASE, kinds={"ours", "absent"})
    assert [c.id for c in claimed] == ids["ours"]
    for job_id in ids["theirs"]:
        assert store.get(job_id).state is State.QUEUED  # type: ignore[union-attr]
    assert store.claim("w", ["default"], 10, LEASE, kinds={"ours"}) == []
    assert store.claim("w", ["default"], 10, LEASE, kinds=set()) == []
    # A worker of "theirs" takes the rest; one that names no kinds, any.
    assert [c.id for c in store.claim("w2", ["default"], 1, LEASE, kinds={"theirs"})] == (
        ids["theirs"][:1]
    )
    assert [c.id for c in store.claim("w3", ["default"], 10, LEASE)] == ids["theirs"][1:]


def test_a_busy_workers_finish_and_claim_takes_only_its_kinds(store: FullStore) -> None:
    ids = mixed(store)
    [first] = store.claim("w", ["default"], 1, LEASE, kinds={"ours"})
    done = [Succeeded(first.id, first.lease_token)]
    applied, claimed = store.finish_and_claim(done, "w", ["default"], 10, LEASE, kinds={"ours"})
    assert applied == [True]
    assert [c.id for c in claimed] == ids["ours"][1:]
    applied, claimed = store.finish_and_claim(
        [Succeeded(c.id, c.lease_token) for c in claimed], "w", ["default"], 10, LEASE,
        kinds={"ours"},
    )  # fmt: skip
    assert applied == [True, True] and claimed == []
    assert all(store.get(i).state is State.QUEUED for i in ids["theirs"])  # type: ignore[union-attr]
