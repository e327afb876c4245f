"""chit as a user gets it: a wheel built from this tree (`python -m build`, the
sdist first, then the wheel from the sdist), installed into a fresh venv with
the core alone, no extras. There it runs a worker on SQLite to a finished
job, and each part that needs an extra says which in one line. In another
fresh venv with `chit[api]`, `chit up --demo` serves the API and runs the
example app's demo jobs."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

import chit
from chit.extras import MODULES
from support.processes import Proc, free_port, stop
from support.waiting import wait_until

# Building and installing take a minute or two on a busy machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
# What the build reads; not the venvs, caches and databases beside it.
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv*", "bench", "site", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
    ".hypothesis", "*.db", "*.db-*", "screenshots", "*.png",
)  # fmt: skip
OPTIONAL = sorted(set().union(*MODULES.values()))
# No proxy from the environment for the servers the tests start here.
LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))
APP = """
import chit

queue = chit.Queue()


@queue.task("add")
def add(job: chit.JobContext, body: dict) -> int:
    return body["a"] + body["b"]
"""


def run(argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def checked(argv: list[str], cwd: Path, timeout: float = 600) -> str:
    done = run(argv, cwd, timeout)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A copy, so the build's egg-info and build/ never land in the work tree.
    tree = tmp_path_factory.mktemp("tree") / "chit"
    shutil.copytree(ROOT, tree, ignore=NOT_COPIED)
    dist = tree / "dist"
    checked([sys.executable, "-m", "build", "--outdir", str(dist), str(tree)], tree)
    (built,) = dist.glob("chit-*.whl")
    assert len(list(dist.glob("chit-*.tar.gz"))) == 1
    return built


@pytest.fixture(scope="module")
def core(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel and its core requirements only; its bin/."""
    venv = tmp_path_factory.mktemp("venv") / "core"
    checked([sys.executable, "-m", "venv", str(venv)], venv.parent)
    checked([str(venv / "bin" / "pip"), "install", "--quiet", str(wheel)], venv.parent)
    return venv / "bin"


@pytest.fixture(scope="module")
def with_api(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel with the `api` extra; its bin/."""
    venv = tmp_path_factory.mktemp("venv") / "api"
    checked([sys.executable, "-m", "venv", str(venv)], venv.parent)
    checked([str(venv / "bin" / "pip"), "install", "--quiet", f"{wheel}[api]"], venv.parent)
    return venv / "bin"


def test_the_wheel_holds_the_package_data_and_the_typed_marker(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "chit/py.typed" in names
    for needed in (
        "chit/store/sql/sqlite/queries.sql",
        "chit/store/sql/postgres/queries.sql",
        "chit/store/sql/sqlite/migrations/001_jobs.sql",
        "chit/dashboard/templates/base.html",
    ):
        assert needed in names, needed
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert f"Version: {chit.__version__}" in text
    requires = [line for line in text.splitlines() if line.startswith("Requires-Dist:")]
    core = [line for line in requires if "extra ==" not in line]
    # pydantic, and cronsim for schedules' cron rules (pure Python, no dependencies).
    assert [line.split()[1].split(">")[0] for line in core] == ["pydantic", "cronsim"], core


def test_the_core_venv_has_no_optional_package_and_imports_none(core: Path, tmp_path: Path) -> None:
    listed = json.loads(checked([str(core / "pip"), "list", "--format", "json"], tmp_path))
    names = {p["name"].lower().replace("-", "_") for p in listed}
    assert not names & {"fastapi", "starlette", "uvicorn", "httpx", "psycopg", "jinja2"}, names
    probe = (
        "import json, sys, chit, chit.cli.main, chit.worker, chit.store.sqlite;"
        "print(json.dumps(sorted(sys.modules)))"
    )
    loaded = json.loads(checked([str(core / "python"), "-c", probe], tmp_path))
    assert not [m for m in loaded if m.split(".")[0] in OPTIONAL]
    assert checked([str(core / "chit"), "--version"], tmp_path) == f"chit {chit.__version__}\n"


@pytest.mark.parametrize("pool", ["thread", "process"])
def test_a_core_install_runs_a_worker_on_sqlite_to_a_finished_job(
    core: Path, tmp_path: Path, pool: str
) -> None:
    (tmp_path / "app.py").write_text(APP)
    env = {"PATH": f"{core}:/usr/bin:/bin", "CHIT_DATABASE_URL": "sqlite:///chit.db"}
    enqueue = (
        "import app; job = app.queue.enqueue('add', {'a': 2, 'b': 3}); print(job.id, flush=True)"
    )
    done = subprocess.run(
        [str(core / "python"), "-c", enqueue],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()

    stderr = tmp_path / "worker.stderr"
    with open(stderr, "wb") as err:
        worker = Proc(
            "core worker",
            subprocess.Popen(
                [str(core / "chit"), "worker", "--app", "app:queue", "--pool", pool],
                cwd=tmp_path,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            ),
            stderr,
        )
        try:
            worker.wait_started()
            status = [str(core / "chit"), "status", job_id, "--app", "app:queue", "--json"]

            def finished() -> dict[str, object] | None:
                out = subprocess.run(
                    status, cwd=tmp_path, env=env, capture_output=True, text=True, check=True
                )
                job: dict[str, object] = json.loads(out.stdout)
                return job if job["state"] == "succeeded" else None

            job = wait_until(finished, 60, interval=0.2, what="the job to succeed")
            assert job["result"] == 5
        finally:
            stop([worker.popen])
    assert worker.popen.returncode == 0, worker.stderr()
    assert "Traceback" not in worker.stderr()


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["serve"], "chit serve needs the HTTP API: pip install 'chit[api]'"),
        (
            ["up", "--demo"],
            "chit up needs the HTTP API (or pass --no-api): pip install 'chit[api]'",
        ),
        (
            ["list", "--database-url", "postgresql://postgres@127.0.0.1:5432/test"],
            "a postgresql:// database needs psycopg: pip install 'chit[postgres]'",
        ),
        (
            ["submit", "add", "{}", "--url", "http://127.0.0.1:9"],
            "the HTTP client (chit.Client, --url) needs httpx: pip install 'chit[client]'",
        ),
    ],
    ids=["serve", "up", "postgres", "client"],
)
def test_a_part_without_its_extra_names_the_extra_in_one_line(
    core: Path, tmp_path: Path, argv: list[str], line: str
) -> None:
    done = run([str(core / "chit"), *argv], tmp_path, timeout=60)
    assert done.returncode == 2
    assert done.stderr == f"chit: error: {line}\n"
    assert done.stdout == ""
    assert not list(tmp_path.iterdir()), "nothing is created"


def test_chit_up_demo_runs_from_a_wheel_with_the_api_extra(with_api: Path, tmp_path: Path) -> None:
    shutil.copy(ROOT / "examples" / "app.py", tmp_path / "app.py")
    port = free_port()
    out = tmp_path / "up.stdout"
    with open(out, "wb") as stdout, open(tmp_path / "up.stderr", "wb") as stderr:
        up = subprocess.Popen(
            [str(with_api / "chit"), "up", "--app", "app:queue", "--demo", "--port", str(port)],
            cwd=tmp_path,
            env={"PATH": f"{with_api}:/usr/bin:/bin", "CHIT_DATABASE_URL": "sqlite:///chit.db"},
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )
    try:
        wait_until(lambda: "submitted 4 demo jobs" in out.read_text(), 60, what="the demo jobs")

        def succeeded() -> list[dict[str, object]]:
            url = f"http://127.0.0.1:{port}/jobs?state=succeeded"
            try:
                with LOCAL.open(url, timeout=5) as answer:
                    jobs: list[dict[str, object]] = json.load(answer)["jobs"]
            except urllib.error.URLError:  # the API still starting
                return []
            return jobs

        # The quickest demo report takes 3 s: a worker ran it and the API answers it.
        jobs = wait_until(succeeded, 60, interval=0.2, what="a demo job to succeed")
        assert jobs[0]["kind"] == "sales_report"
        with LOCAL.open(f"http://127.0.0.1:{port}/ui/login", timeout=5) as page:
            assert page.status == 200
    finally:
        up.send_signal(signal.SIGTERM)
        code = up.wait(60)
    assert code == 0, (tmp_path / "up.stderr").read_text()[-3000:]


@pytest.mark.parametrize(
    ("statement", "line"),
    [
        (
            "from chit.api import create_router",
            "chit.api.create_router needs FastAPI: pip install 'chit[api]'",
        ),
        (
            "chit.Client",
            "the HTTP client (chit.Client, --url) needs httpx: pip install 'chit[client]'",
        ),
        (
            "chit.Queue('postgresql://postgres@127.0.0.1/test').store",
            "a postgresql:// database needs psycopg: pip install 'chit[postgres]'",
        ),
    ],
    ids=["create_router", "Client", "postgres"],
)
def test_library_calls_without_their_extra_raise_missing_extra(
    core: Path, tmp_path: Path, statement: str, line: str
) -> None:
    probe = (
        "import chit\n"
        "from chit.extras import MissingExtra\n"
        "try:\n"
        f"    {statement}\n"
        "except MissingExtra as e:\n"
        "    assert isinstance(e, ImportError)\n"
        "    print(e)\n"
    )
    out = checked([str(core / "python"), "-c", probe], tmp_path)
    assert out == line + "\n"
