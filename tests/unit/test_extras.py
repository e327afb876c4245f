"""The one-line error for a missing extra (chit.extras). The real thing, a
wheel installed without extras, is tests/packaging/test_wheel.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import chit
from chit.errors import ConfigError
from chit.extras import MODULES, MissingExtra, needs


def test_a_missing_module_of_the_extra_names_the_extra() -> None:
    with pytest.raises(MissingExtra) as caught, needs("api", "chit serve needs the HTTP API"):
        raise ModuleNotFoundError("No module named 'uvicorn.config'", name="uvicorn.config")
    assert str(caught.value) == "chit serve needs the HTTP API: pip install 'chit[api]'"
    assert caught.value.extra == "api"
    assert isinstance(caught.value, ConfigError) and isinstance(caught.value, ImportError)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_module_of_no_extra_is_a_bug_and_passes_through() -> None:
    with pytest.raises(ModuleNotFoundError) as caught, needs("api", "chit serve"):
        import chit_no_such_module  # type: ignore[import-not-found]  # noqa: F401
    assert not isinstance(caught.value, MissingExtra)
    # psycopg belongs to another extra: not the API's to explain.
    with pytest.raises(ModuleNotFoundError), needs("api", "chit serve"):
        raise ModuleNotFoundError("No module named 'psycopg'", name="psycopg")


def test_nested_the_outer_block_says_what_the_user_asked_for() -> None:
    with (
        pytest.raises(MissingExtra) as caught,
        needs("api", "chit up needs the HTTP API"),
        needs("api", "chit serve needs the HTTP API"),
    ):
        raise ModuleNotFoundError(name="fastapi")
    assert str(caught.value).startswith("chit up needs the HTTP API:")
    # Another extra's error is left as it is.
    with (
        pytest.raises(MissingExtra) as caught,
        needs("api", "chit up"),
        needs("postgres", "a postgresql:// database needs psycopg"),
    ):
        raise ModuleNotFoundError(name="psycopg")
    assert caught.value.extra == "postgres"


def test_every_extra_explained_is_declared_in_the_package() -> None:
    from importlib import metadata

    declared = set(metadata.metadata("chit").get_all("Provides-Extra") or [])
    assert set(MODULES) <= declared
    assert {"postgres", "api", "client", "otel", "django", "docs", "all"} <= declared


def test_the_version_is_the_installed_package_s() -> None:
    from importlib import metadata

    assert chit.__version__ == metadata.version("chit")


def test_chit_version_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    from chit.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"chit {chit.__version__}\n"


def test_the_core_loads_no_optional_module_even_where_installed(tmp_path: Path) -> None:
    """Here every extra is installed, so an eager import would go unnoticed
    until a core-only install; sys.modules shows it at once."""
    probe = f"""
import json, sys
import chit
from chit.cli.main import main
from chit.worker import Worker
queue = chit.Queue(database_url="sqlite:///{tmp_path}/chit.db")
queue.store.migrate()
assert main(["list", "--database-url", "sqlite:///{tmp_path}/chit.db"]) == 0
print(json.dumps(sorted(sys.modules)))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    loaded = json.loads(done.stdout.splitlines()[-1])
    optional = set().union(*MODULES.values())
    assert [m for m in loaded if m.split(".")[0] in optional] == []
