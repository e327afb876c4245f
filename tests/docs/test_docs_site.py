"""The docs site (mkdocs.yml, `make docs`): it builds with warnings as errors,
and its API reference documents every public name of `chit`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

import chit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def build(root: Path, out: Path) -> Path:
    """`make docs` (mkdocs build --strict) on `root`'s mkdocs.yml, into `out`."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=root,
        env=os.environ | {"NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(ROOT, tmp_path_factory.mktemp("site"))


def inventory(site: Path) -> set[str]:
    """The names in objects.inv (Sphinx's inventory format, version 2): four
    header lines, then zlib-compressed lines of `name domain:role priority uri dispname`."""
    header, _, body = (site / "objects.inv").read_bytes().partition(b"compressed using zlib.\n")
    assert header.startswith(b"# Sphinx inventory version 2")
    return {line.split()[0] for line in zlib.decompress(body).decode().splitlines()}


def test_every_public_name_is_in_the_api_reference(site: Path) -> None:
    names = inventory(site)
    missing = [name for name in chit.__all__ if f"chit.{name}" not in names]
    assert missing == []
    page = (site / "reference" / "index.html").read_text()
    for name in chit.__all__:
        assert f'id="chit.{name}"' in page, name


def test_the_front_page_is_the_readme_with_links_into_the_site(site: Path) -> None:
    page = (site / "index.html").read_text()
    assert "Durable background jobs for Python" in page
    # README links docs/x.md from the root; on the site the page is beside it.
    assert 'href="flow-control/"' in page
    assert not re.findall(r'href="[^"]*docs/[^"]*"', page)
    assert (site / "changelog" / "index.html").is_file()


def test_every_page_in_docs_is_built(site: Path) -> None:
    pages = list((ROOT / "docs").rglob("*.md"))
    assert pages
    for page in pages:
        built = site / page.relative_to(ROOT / "docs").with_suffix("") / "index.html"
        if page.stem == "index":
            built = site / page.relative_to(ROOT / "docs").parent / "index.html"
        assert built.is_file(), page
        assert re.search(r"<h1[^>]*>", built.read_text()), page


def test_the_nav_bends_to_the_pages_there_are(tmp_path: Path) -> None:
    """A branch that adds a page before the nav lists it, or whose nav lists a
    page another branch brings, still builds with --strict."""
    tree = tmp_path / "tree"
    for part in ("mkdocs.yml", "README.md", "CHANGELOG.md", "scripts", "src", "docs"):
        source = ROOT / part
        if source.is_dir():
            shutil.copytree(source, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            tree.mkdir(exist_ok=True)
            shutil.copy(source, tree / part)
    config = (tree / "mkdocs.yml").read_text()
    assert "  - Guides:\n" in config
    config = config.replace("  - Guides:\n", "  - Guides:\n      - Not yet: not-yet.md\n")
    (tree / "mkdocs.yml").write_text(config)
    (tree / "docs" / "brand-new.md").write_text("# A brand-new guide\n\nText.\n")
    site = build(tree, tmp_path / "site")
    page = (site / "index.html").read_text()
    assert 'href="brand-new/"' in page and "A brand-new guide" in page
    assert "not-yet" not in page
