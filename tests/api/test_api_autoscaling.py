"""docs/autoscaling.md against real processes: a `chit serve`, two `chit
worker`s that register themselves, and a real Prometheus server scraping the
API. Each KEDA `valueLocation` in the page is read from the server's own `GET
/queues` answer, and each PromQL query (KEDA's Prometheus trigger, the
prometheus-adapter rule behind the HPA) is run by Prometheus; both must give
the ready count. A worker stopped by SIGTERM is gone from the count at once,
one killed by SIGKILL once its beat goes stale. On SQLite and on Redis (a
redis-server of the module's own); PostgreSQL's queue counts and worker beats
are the same SQL as SQLite's, held by the store tests."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from chit.settings import Settings
from chit.store import open_store
from chit.store.sqlite import SQLiteStore
from support import gjson
from support.processes import Procs, child_env, free_port, wait_ready
from support.redis import redis_server
from support.stack import SERVER
from support.waiting import wait_until

pytestmark = pytest.mark.slow

DOC = Path(__file__).parents[2] / "docs" / "autoscaling.md"
KEY = "autoscale-root-0123456789"
BACKLOG = 5


def yaml_documents() -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    return [d for block in blocks for d in yaml.safe_load_all(block) if d]


def triggers(kind: str) -> list[dict[str, Any]]:
    found = [
        t["metadata"]
        for d in yaml_documents()
        if d.get("kind") == "ScaledObject"
        for t in d["spec"]["triggers"]
        if t["type"] == kind
    ]
    assert found, f"no {kind} trigger in {DOC.name}"
    return found


@pytest.fixture(scope="module", params=["sqlite", "redis"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Procs, list[Any]]]:
    tmp = tmp_path_factory.mktemp("autoscale")
    with ExitStack() as servers:
        if request.param == "redis":
            database_url = servers.enter_context(redis_server())
        else:
            SQLiteStore(tmp / "chit.db").close()
            database_url = f"sqlite:///{tmp / 'chit.db'}"
        yield from _stack(tmp, database_url)


def _stack(tmp: Path, database_url: str) -> Iterator[tuple[str, Procs, list[Any]]]:
    # `default` paused before any worker starts: a worker reads pauses at most
    # a second late (FLOW_SECONDS), and the backlog must stay ready.
    store = open_store(Settings(database_url=database_url))
    try:
        store.pause(queue="default")
    finally:
        store.close()
    procs = Procs(tmp, child_env(CHIT_DATABASE_URL=database_url, CHIT_API_KEYS=f"*:admin:{KEY}"))
    port = free_port()
    server = procs.start(["-c", SERVER.format(module="support.api_app", port=port)], "server")
    url = f"http://127.0.0.1:{port}"
    # --lease 2: an upkeep a second, a dead worker's beat stale within 3 s.
    workers = [
        procs.worker(
            "--lease", "2", "--concurrency", "3", app="support.api_app:queue", name=f"w{i}"
        )
        for i in range(2)
    ]
    try:
        wait_ready(server, lambda: httpx.get(f"{url}/readyz"), 60, what="the API to answer")
        for w in workers:
            w.wait_started()
        yield url, procs, workers
    finally:
        procs.cleanup()


def get_queues(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/queues", headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.fixture(scope="module")
def backlog(stack: tuple[str, Procs, list[Any]]) -> str:
    """BACKLOG ready jobs in `default`, paused so that the workers leave them."""
    url = stack[0]
    auth = {"Authorization": f"Bearer {KEY}"}
    for n in range(BACKLOG):
        body = {"kind": "echo", "payload": {"message": f"m{n}"}}
        assert httpx.post(f"{url}/jobs", json=body, headers=auth).status_code == 202
    return url


def test_the_keda_json_paths_read_the_real_answer(backlog: str) -> None:
    answer = wait_until(
        lambda: (a := get_queues(backlog))["workers"]["count"] == 2 and a,
        30,
        what="both workers to register",
    )
    assert answer["workers"] == {"count": 2, "slots": 6, "busy": 0}
    default = next(q for q in answer["queues"] if q["name"] == "default")
    assert (default["ready"], default["paused"]) == (BACKLOG, True), answer
    for trigger in triggers("metrics-api"):
        assert trigger["url"].endswith("/queues") and trigger["authMode"] == "bearer"
        assert gjson.get(answer, trigger["valueLocation"]) == BACKLOG
    # The paths the page writes in its prose, too.
    prose = re.findall(r"valueLocation: '([^']+)'", DOC.read_text())
    assert len(prose) >= 2
    for path in prose:
        field = path.rsplit(".", 1)[1]
        assert gjson.get(answer, path) == default[field], path


@pytest.fixture(scope="module")
def prometheus(backlog: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is missing: apt-get install prometheus (scripts/test-deps.sh)")
    tmp = tmp_path_factory.mktemp("prometheus")
    target = backlog.removeprefix("http://")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "chit",
                "metrics_path": "/metrics",
                "authorization": {"type": "Bearer", "credentials": KEY},
                "static_configs": [{"targets": [target]}],
            }
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = open(tmp / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def query(prometheus: str, promql: str) -> list[dict[str, Any]]:
    try:
        response = httpx.get(f"{prometheus}/api/v1/query", params={"query": promql})
    except httpx.TransportError:
        return []  # not listening yet
    assert response.status_code in (200, 503), response.text
    if response.status_code == 503:
        return []  # starting: its answer is plain text ("Service Unavailable")
    body = response.json()
    return list(body["data"]["result"]) if body.get("status") == "success" else []


def scalar(prometheus: str, promql: str) -> float | None:
    result = query(prometheus, promql)
    return float(result[0]["value"][1]) if result else None


def test_the_promql_of_keda_and_the_hpa_adapter_give_the_backlog(prometheus: str) -> None:
    for trigger in triggers("prometheus"):
        promql = trigger["query"]
        wait_until(
            lambda q=promql: scalar(prometheus, q) == BACKLOG,
            60,
            what=f"Prometheus to scrape chit and answer {promql} = {BACKLOG}",
        )
    [adapter] = [d for d in yaml_documents() if "externalRules" in d]
    [rule] = adapter["externalRules"]
    # What prometheus-adapter sends for the HPA's metric and its selector.
    series = rule["seriesQuery"]
    assert query(prometheus, series), f"{series} selects no series"
    name = re.match(r"\w+", series)
    assert name is not None and rule["name"]["as"] == name.group(0)
    promql = (
        rule["metricsQuery"]
        .replace("<<.Series>>", name.group(0))
        .replace("<<.LabelMatchers>>", 'queue="default"')
    )
    assert scalar(prometheus, promql) == BACKLOG
    [hpa] = [d for d in yaml_documents() if d.get("kind") == "HorizontalPodAutoscaler"]
    metric = hpa["spec"]["metrics"][0]["external"]["metric"]
    assert metric["name"] == rule["name"]["as"]
    assert metric["selector"]["matchLabels"] == {"queue": "default"}
    assert scalar(prometheus, "chit_workers") == 2


def test_a_stopped_worker_leaves_at_once_a_killed_one_when_its_beat_goes_stale(
    stack: tuple[str, Procs, list[Any]], backlog: str
) -> None:
    url, _, workers = stack
    wait_until(lambda: get_queues(url)["workers"]["count"] == 2, 30, what="two workers")
    workers[0].signal(signal.SIGTERM)
    assert workers[0].wait(30) == 0
    # Unregistered as it stopped: no wait for its beat to go stale.
    assert get_queues(url)["workers"]["count"] == 1
    workers[1].signal(signal.SIGKILL)
    workers[1].wait(30)
    wait_until(
        lambda: get_queues(url)["workers"] == {"count": 0, "slots": 0, "busy": 0},
        30,
        what="the killed worker's beat to go stale",
    )
