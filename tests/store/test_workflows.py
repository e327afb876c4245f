"""Dependencies in the store, on every backend (DESIGN.md "Workflows and steps"):
release in the transaction of the last success, cancellation down the graph,
callbacks, replay putting the graph back, and graphs refused whole."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chit
from chit.bounds import DEPENDENCIES_MAX
from chit.errors import InvalidRequest
from chit.jobs import (
    ClaimedJob,
    DependencyCounts,
    Failed,
    NewJob,
    Released,
    ReplaySelector,
    RunOn,
    SignalStatus,
    State,
    Succeeded,
    Suspended,
)
from chit.store.base import Store
from chit.store.capabilities import Workflows
from store.test_contract import LEASE, later, new
from support.store_backends import Backend
from support.store_inspection import StoreInspection

FINISHED = RunOn.FINISHED


def claim_all(store: Store, limit: int = 100) -> list[ClaimedJob]:
    return store.claim("w1", ["default"], limit, LEASE)


def state(store: Store, job_id: str) -> State:
    job = store.get(job_id)
    assert job is not None
    return job.state


def graph(store: Store, *jobs: NewJob) -> dict[str, str]:
    """Enqueue one graph; ids by ref."""
    results = store.enqueue_many(list(jobs))
    assert len({r.workflow_id for r in results}) == 1 and results[0].workflow_id
    return {job.ref: r.id for job, r in zip(jobs, results, strict=True) if job.ref}


def succeed(store: Store, claimed: list[ClaimedJob]) -> None:
    assert all(store.finish([Succeeded(c.id, c.lease_token, {"kind": c.kind}) for c in claimed]))


def test_a_diamond_is_released_level_by_level_and_the_last_job_reads_both_results(
    store: Store,
) -> None:
    ids = graph(
        store,
        new("a", ref="a"),
        new("b", ref="b", depends_on=("a",)),
        new("c", ref="c", depends_on=("a",)),
        new("d", ref="d", depends_on=("b", "c")),
    )
    assert [state(store, ids[r]) for r in "abcd"] == [State.QUEUED] + [State.WAITING] * 3
    d = store.get(ids["d"])
    assert d is not None and d.depends_on == (ids["b"], ids["c"])
    assert d.dependencies == DependencyCounts(2, 0, 0, 0, 2)
    [a] = claim_all(store)
    assert a.id == ids["a"] and not a.has_dependencies
    succeed(store, [a])
    level = claim_all(store)
    assert sorted(c.id for c in level) == sorted([ids["b"], ids["c"]])
    # One success of two: d still waits.
    succeed(store, level[:1])
    assert state(store, ids["d"]) is State.WAITING
    assert claim_all(store) == []
    # finish_and_claim: the outcome that releases d, and d, in one call.
    other = level[1]
    done, claimed = store.finish_and_claim(
        [Succeeded(other.id, other.lease_token, {"kind": other.kind})], "w1", ["default"], 5, LEASE
    )
    if not claimed:  # PostgreSQL's one statement claims from its snapshot: d comes next
        claimed = claim_all(store)
    assert done == [True] and [c.id for c in claimed] == [ids["d"]]
    assert claimed[0].has_dependencies
    deps = store.dependencies(ids["d"])
    assert [(x.id, x.kind, x.state, x.result) for x in deps] == [
        (ids["b"], "b", State.SUCCEEDED, {"kind": "b"}),
        (ids["c"], "c", State.SUCCEEDED, {"kind": "c"}),
    ]
    assert isinstance(store, Workflows)
    assert store.dependents(ids["a"]) == [ids["b"], ids["c"]]
    view = store.workflow(next(iter({store.get(ids["a"]).workflow_id})))  # type: ignore[union-attr]
    assert view is not None
    assert [(j.ref, j.depends_on) for j in view.jobs] == [
        ("a", ()),
        ("b", (ids["a"],)),
        ("c", (ids["a"],)),
        ("d", (ids["b"], ids["c"])),
    ]


def test_a_failure_cancels_down_the_graph_a_callback_still_runs_and_replay_puts_it_back(
    store: Store,
) -> None:
    ids = graph(
        store,
        new("a", ref="a", max_attempts=1),
        new("b", ref="b", depends_on=("a",)),
        new("c", ref="c", depends_on=("b",)),
        new("notify", ref="notify", depends_on=("a", "c"), run_on=FINISHED),
    )
    [a] = claim_all(store)
    assert store.finish([Failed(a.id, a.lease_token, "boom", retry_in=1)]) == [True]
    b, c = store.get(ids["b"]), store.get(ids["c"])
    assert b is not None and b.state is State.CANCELLED
    assert b.error == f"dependency {ids['a']} failed"
    assert c is not None and c.state is State.CANCELLED
    assert c.error == f"dependency {ids['b']} cancelled"
    [notify] = claim_all(store)
    assert notify.id == ids["notify"]
    assert [x.state for x in store.dependencies(notify.id)] == [State.FAILED, State.CANCELLED]
    succeed(store, [notify])

    assert store.retry(ids["a"])
    assert [state(store, ids[r]) for r in "abc"] == [State.QUEUED, State.WAITING, State.WAITING]
    for kind in "abc":
        [job] = claim_all(store)
        assert job.kind == kind
        succeed(store, [job])
    assert state(store, ids["notify"]) is State.SUCCEEDED  # it ran once, and stays done
    assert claim_all(store) == []


def test_a_job_enqueued_after_its_dependency_ended_is_stored_settled(store: Store) -> None:
    ok = store.enqueue(new("ok")).id
    bad = store.enqueue(new("bad")).id
    for c in claim_all(store):
        outcome = Succeeded(c.id, c.lease_token) if c.id == ok else Failed(c.id, c.lease_token, "x")
        store.finish([outcome])
    assert state(store, store.enqueue(new("after_ok", depends_on=(ok,))).id) is State.QUEUED
    late = store.get(store.enqueue(new("after_bad", depends_on=(ok, bad))).id)
    assert late is not None and late.state is State.CANCELLED
    assert late.error == f"dependency {bad} failed" and late.finished_at is not None
    callback = store.enqueue(new("cb", depends_on=(bad,), run_on=FINISHED)).id
    assert state(store, callback) is State.QUEUED
    # A job added to a stored one joins its workflow (here: none; a new one).
    assert store.enqueue(new("x", depends_on=(ok,))).workflow_id


def test_a_dependent_added_to_a_running_job_joins_its_workflow_and_is_released(
    store: Store,
) -> None:
    first = store.enqueue_many([new("a", ref="a")])[0]
    [a] = claim_all(store)
    later_job = store.enqueue(new("b", depends_on=(first.id,)))
    assert later_job.workflow_id == first.workflow_id
    assert state(store, later_job.id) is State.WAITING
    succeed(store, [a])
    assert [c.id for c in claim_all(store)] == [later_job.id]


def test_cancelling_a_job_cancels_its_waiting_dependents(store: Store) -> None:
    ids = graph(
        store,
        new("a", ref="a"),
        new("b", ref="b", depends_on=("a",)),
        new("c", ref="c", depends_on=("b",)),
        new("cb", ref="cb", depends_on=("c",), run_on=FINISHED),
    )
    assert store.cancel(ids["b"]).value == "cancelled"
    assert state(store, ids["c"]) is State.CANCELLED
    assert state(store, ids["cb"]) is State.QUEUED
    assert isinstance(store, Workflows)
    workflow_id = store.get(ids["a"]).workflow_id  # type: ignore[union-attr]
    assert workflow_id is not None
    assert store.cancel_workflow(workflow_id) == 2  # a and cb
    assert [state(store, ids[r]) for r in ("a", "cb")] == [State.CANCELLED] * 2
    assert store.cancel_workflow(workflow_id) == 0
    assert store.cancel_workflow("nope") is None
    assert store.workflow("nope") is None


def test_a_rescued_job_out_of_attempts_cancels_its_dependents(store: Store) -> None:
    ids = graph(store, new("a", ref="a", max_attempts=1), new("b", ref="b", depends_on=("a",)))
    claim_all(store)
    assert store.rescue_expired(now=later(LEASE + 5)).failed == 1
    b = store.get(ids["b"])
    assert b is not None and b.state is State.CANCELLED
    assert b.error == f"dependency {ids['a']} failed"


def test_a_handed_back_job_keeps_its_dependents_waiting(store: Store) -> None:
    ids = graph(store, new("a", ref="a"), new("b", ref="b", depends_on=("a",)))
    [a] = claim_all(store)
    assert store.finish([Released(a.id, a.lease_token)]) == [True]
    assert state(store, ids["b"]) is State.WAITING
    [a] = claim_all(store)
    succeed(store, [a])
    assert [c.id for c in claim_all(store)] == [ids["b"]]


def test_replaying_a_dependent_whose_dependency_still_failed_makes_it_wait(store: Store) -> None:
    ids = graph(store, new("a", ref="a"), new("b", ref="b", depends_on=("a",)))
    [a] = claim_all(store)
    store.finish([Failed(a.id, a.lease_token, "x")])
    assert store.retry(ids["b"])
    assert state(store, ids["b"]) is State.WAITING
    assert claim_all(store) == []


def callback_of_a_failure(store: Store, **callback: object) -> tuple[dict[str, str], ClaimedJob]:
    """Job a, failed, and its callback cb (run_on finished), claimed; ids by ref."""
    ids = graph(
        store,
        new("a", ref="a", max_attempts=1),
        new("cb", ref="cb", depends_on=("a",), run_on=FINISHED, **callback),
    )
    [a] = claim_all(store)
    assert store.finish([Failed(a.id, a.lease_token, "boom")]) == [True]
    [cb] = claim_all(store)
    assert cb.id == ids["cb"]
    return ids, cb


@pytest.mark.parametrize("order", ["dependency first", "callback first", "in one replay"])
def test_a_failed_callback_replayed_with_its_dependency_runs_after_it_again(
    store: Store, order: str
) -> None:
    # A replay makes a job new (never started), so its dependency's replay,
    # before or after, holds it until that dependency ends again.
    ids, cb = callback_of_a_failure(store, max_attempts=1)
    assert store.finish([Failed(cb.id, cb.lease_token, "callback boom")]) == [True]
    if order == "dependency first":
        assert store.retry(ids["a"]) and store.retry(ids["cb"])
    elif order == "callback first":
        assert store.retry(ids["cb"]) and store.retry(ids["a"])
    else:
        assert store.replay(ReplaySelector()) == 2
    assert state(store, ids["cb"]) is State.WAITING
    [again] = claim_all(store)
    assert again.id == ids["a"]  # not the callback beside it
    succeed(store, [again])
    [last] = claim_all(store)
    assert last.id == ids["cb"] and last.attempt == 1
    started = store.get(ids["cb"])
    assert started is not None and started.started_at is not None


@pytest.mark.parametrize("replayed_while", ["waiting", "running"])
def test_a_replay_leaves_a_callback_that_started_to_wait_for_its_own_signal(
    store: Store, replayed_while: str
) -> None:
    # A callback released by a failure that has started (it runs, or waits for
    # a signal) is not its dependency's to hold again: the replayed job's end
    # must not queue it before its signal comes.
    ids, cb = callback_of_a_failure(store)
    if replayed_while == "running":
        assert store.retry(ids["a"])
    assert store.finish([Suspended(cb.id, cb.lease_token, "go", None, None)]) == [True]
    if replayed_while == "waiting":
        assert store.retry(ids["a"])
    [again] = claim_all(store)
    assert again.id == ids["a"]
    succeed(store, [again])
    assert state(store, ids["cb"]) is State.WAITING  # for its signal, not queued by a's end
    assert claim_all(store) == []
    assert store.signal(ids["cb"], "go", {"ok": True}).status is SignalStatus.CREATED  # type: ignore[attr-defined]
    [resumed] = claim_all(store)
    assert resumed.id == ids["cb"]
    succeed(store, [resumed])
    done = store.get(ids["cb"])
    assert done is not None and done.state is State.SUCCEEDED


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        ([new("a", ref="x", depends_on=("y",)), new("a", ref="y", depends_on=("x",))], "cycle"),
        ([new("a", ref="x", depends_on=("x",))], "depends on itself"),
        ([new("a", ref="x"), new("a", depends_on=("nope",))], "no such job"),
        ([new("a", ref="x"), new("a", ref="x")], "duplicate ref"),
        ([new("a", ref="")], "a ref must be"),
        ([new("a", ref="x"), new("a", depends_on=("x",), tenant="t2")], "another tenant"),
    ],
)
def test_a_bad_graph_is_refused_and_nothing_is_stored(
    store: Store, inspect: StoreInspection, jobs: list[NewJob], message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        store.enqueue_many(jobs)
    assert inspect.job_count() == 0


def test_a_stored_job_of_another_tenant_cannot_be_depended_on(
    store: Store, inspect: StoreInspection
) -> None:
    theirs = store.enqueue(new("a", tenant="t1")).id
    with pytest.raises(InvalidRequest, match="no such job"):
        store.enqueue_many([new("b", ref="b", tenant="t2"), new("c", depends_on=(theirs,))])
    assert inspect.job_count() == 1


def test_more_than_the_bound_of_edges_in_one_call_is_refused(
    store: Store, inspect: StoreInspection
) -> None:
    base = store.enqueue(new("a")).id
    per_job = 1000
    jobs = [
        new("b", depends_on=tuple([base] * per_job)) for _ in range(DEPENDENCIES_MAX // per_job + 1)
    ]
    with pytest.raises(InvalidRequest, match="100,000"):
        store.enqueue_many(jobs)
    assert inspect.job_count() == 1


def test_a_bad_run_on_is_refused_by_the_queue(store: Store, inspect: StoreInspection) -> None:
    queue = chit.Queue(settings=chit.Settings(database_url="sqlite:///unused.db"))
    queue.use_store(store)  # type: ignore[arg-type]
    queue.task("a")(lambda job, body: None)
    with pytest.raises(InvalidRequest, match="run_on must be"):
        queue.enqueue("a", depends_on=["x"], run_on="sometimes")
    with pytest.raises(InvalidRequest, match="no such job"):
        queue.enqueue("a", depends_on=["x"])
    assert inspect.job_count() == 0


def test_enqueue_workflow_refuses_a_batch_without_edges_before_storing_it(
    store: Store, inspect: StoreInspection
) -> None:
    queue = chit.Queue(settings=chit.Settings(database_url="sqlite:///unused.db"))
    queue.use_store(store)  # type: ignore[arg-type]
    queue.task("a")(lambda job, body: None)
    with pytest.raises(InvalidRequest, match="at least one job with a ref"):
        queue.enqueue_workflow([chit.JobRequest("a"), chit.JobRequest("a")])
    assert inspect.job_count() == 0


def test_enqueue_workflow_again_under_the_same_keys_answers_the_stored_workflow(
    store: Store, inspect: StoreInspection
) -> None:
    queue = chit.Queue(settings=chit.Settings(database_url="sqlite:///unused.db"))
    queue.use_store(store)  # type: ignore[arg-type]
    queue.task("a")(lambda job, body: None)
    # (Jobs that others of the call depend on cannot match by key: see _insert_graph.)
    requests = [
        chit.JobRequest("a", ref="x", idempotency_key="k1"),
        chit.JobRequest("a", ref="y", idempotency_key="k2"),
    ]
    first = queue.enqueue_workflow(requests)
    again = queue.enqueue_workflow(requests)
    assert again.id == first.id and again.ids == first.ids and again.jobs == first.jobs
    assert inspect.job_count() == 2


def test_the_same_idempotency_key_with_other_dependencies_is_a_conflict(
    store: Store, inspect: StoreInspection
) -> None:
    queue = chit.Queue(settings=chit.Settings(database_url="sqlite:///unused.db"))
    queue.use_store(store)  # type: ignore[arg-type]
    queue.task("a")(lambda job, body: None)
    a, b = queue.enqueue("a").id, queue.enqueue("a").id
    first = queue.enqueue("a", idempotency_key="k", depends_on=[a, b])
    again = queue.enqueue("a", idempotency_key="k", depends_on=[b, a])  # the same set
    assert again.id == first.id and not again.created
    for other in (
        {"depends_on": [a]},
        {},
        {"depends_on": [a, b], "run_on": "finished"},
    ):
        with pytest.raises(chit.IdempotencyConflict):
            queue.enqueue("a", idempotency_key="k", **other)  # type: ignore[arg-type]
    queue.enqueue("a", idempotency_key="plain")
    with pytest.raises(chit.IdempotencyConflict):
        queue.enqueue("a", idempotency_key="plain", depends_on=[a])
    assert inspect.job_count() == 4


# Random graphs and outcomes: the rules hold whatever the shape.

OUTCOMES = st.sampled_from(["succeed", "fail", "cancel"])


@st.composite
def dags(draw: st.DrawFn) -> list[tuple[list[int], RunOn, str]]:
    """Jobs by position, each with its dependencies (earlier positions only,
    so no cycle), when it runs, and how it will end if it runs."""
    n = draw(st.integers(1, 8))
    return [
        (
            sorted(draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else []),
            draw(st.sampled_from([RunOn.SUCCEEDED, RunOn.FINISHED])),
            draw(OUTCOMES),
        )
        for i in range(n)
    ]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(shape=dags())
def test_random_graphs_run_in_dependency_order_and_end_terminal(
    backend: Backend, store: Store, shape: list[tuple[list[int], RunOn, str]]
) -> None:
    backend.reset()
    jobs = [
        new(f"k{n}", ref=str(n), depends_on=tuple(str(d) for d in deps), run_on=run_on)
        for n, (deps, run_on, _) in enumerate(shape)
    ]
    ids = [r.id for r in store.enqueue_many(jobs)]
    position = {job_id: n for n, job_id in enumerate(ids)}
    starts: Counter[str] = Counter()
    while claimed := claim_all(store):
        for c in claimed:
            n = position[c.id]
            starts[c.id] += 1
            deps, run_on, outcome = shape[n]
            for d in deps:
                got = state(store, ids[d])
                assert got is State.SUCCEEDED or (run_on is RunOn.FINISHED and got.terminal)
            match outcome:
                case "succeed":
                    result = Succeeded(c.id, c.lease_token)
                case "fail":
                    result = Failed(c.id, c.lease_token, "x")  # type: ignore[assignment]
                case _:
                    store.cancel(c.id)
                    result = Failed(c.id, c.lease_token, "stopped")  # type: ignore[assignment]
            assert store.finish([result]) == [True]
    assert max(starts.values(), default=1) == 1  # nothing released twice
    final = [state(store, job_id) for job_id in ids]
    assert all(s.terminal for s in final)
    for n, (deps, run_on, outcome) in enumerate(shape):
        ran = ids[n] in starts
        if run_on is RunOn.FINISHED:
            assert ran
        else:
            assert ran == all(final[d] is State.SUCCEEDED for d in deps)
        if ran:
            expected = {"succeed": State.SUCCEEDED, "fail": State.FAILED}.get(outcome)
            assert final[n] is (expected or State.CANCELLED)
        else:
            assert final[n] is State.CANCELLED


def test_a_large_fan_in_is_released_once_by_its_last_dependency(store: Store) -> None:
    jobs = [new("part", ref=f"p{n}") for n in range(150)]  # past COPY_FROM on PostgreSQL
    jobs.append(new("merge", ref="merge", depends_on=tuple(f"p{n}" for n in range(150))))
    ids = graph(store, *jobs)
    parts = store.claim("w1", ["default"], 200, LEASE)
    assert len(parts) == 150
    succeed(store, parts[:149])
    assert state(store, ids["merge"]) is State.WAITING
    succeed(store, parts[149:])
    [merge] = claim_all(store)
    assert merge.id == ids["merge"]
    job = store.get(merge.id)
    assert job is not None and job.dependencies == DependencyCounts(150, 150, 0, 0, 0)


def test_a_delayed_dependent_keeps_its_run_at(store: Store) -> None:
    ids = graph(store, new("a", ref="a"), new("b", ref="b", depends_on=("a",), run_at=later(3600)))
    succeed(store, claim_all(store))
    assert state(store, ids["b"]) is State.QUEUED
    assert claim_all(store) == []  # due in an hour
    assert store.claim("w1", ["default"], 5, LEASE, now=later(3600) + timedelta(seconds=1))


def fail_one(store: Store, kind: str = "bad") -> str:
    job_id = store.enqueue(new(kind, max_attempts=1)).id
    [c] = store.claim("w1", ["default"], 1, LEASE)
    assert store.finish([Failed(c.id, c.lease_token, "boom")]) == [True]
    return job_id


def test_a_job_stored_cancelled_at_enqueue_is_in_its_workflow(store: Store) -> None:
    # Redis stored it before it named it in the workflow's set: workflow()
    # left it out, and found none when it was the call's only job.
    bad = fail_one(store)
    [late] = store.enqueue_many([new("late", ref="late", depends_on=(bad,))])
    assert state(store, late.id) is State.CANCELLED
    assert isinstance(store, Workflows)
    assert late.workflow_id is not None
    view = store.workflow(late.workflow_id)
    assert view is not None and [j.id for j in view.jobs] == [late.id]


def test_a_job_stored_cancelled_at_enqueue_neither_holds_nor_meets_a_unique_key(
    store: Store,
) -> None:
    # As on SQL, whose unique index holds active jobs only: a job stored
    # cancelled is stored though another holds its key, and holds it for no one.
    bad = fail_one(store)
    holder = store.enqueue(new("k", unique_key="u")).id
    late = store.enqueue(new("late", depends_on=(bad,), unique_key="u"))
    assert late.created and late.id != holder and state(store, late.id) is State.CANCELLED
    first, second = store.enqueue_many(
        [new("late", ref="late", depends_on=(bad,), unique_key="v"), new("plain", unique_key="v")]
    )
    assert first.created and state(store, first.id) is State.CANCELLED
    assert second.created and second.id != first.id and state(store, second.id) is State.QUEUED


def test_a_dependent_cancelled_by_two_failures_of_one_call_names_the_first_by_id(
    store: Store,
) -> None:
    # Redis named the dependency it settled first, the call's order; a retry
    # of the one by id then left the dependent cancelled.
    a, b, c = (
        r.id
        for r in store.enqueue_many(
            [
                new("a", ref="a", max_attempts=1),
                new("b", ref="b", max_attempts=1),
                new("c", ref="c", depends_on=("a", "b")),
            ]
        )
    )
    claimed = {j.id: j for j in store.claim("w1", ["default"], 2, LEASE)}
    assert sorted(claimed) == sorted([a, b])
    outcomes = [Failed(x, claimed[x].lease_token, "boom") for x in (b, a)]  # the later id first
    assert store.finish(outcomes) == [True, True]
    job = store.get(c)
    assert job is not None and job.state is State.CANCELLED
    assert job.error == f"dependency {a} failed"
