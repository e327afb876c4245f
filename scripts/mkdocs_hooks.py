"""MkDocs hooks (mkdocs.yml): the site's front page is README.md and its
changelog CHANGELOG.md, read from the repository root so neither is copied.
The nav bends to the pages there are, so a branch that adds or has not yet
added a page never fails --strict over it: nav entries whose page is not
written are left out, and a page in docs/ the nav does not list goes at the
end of the Guides."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
# Site page: repository file it is made from.
GENERATED = {"index.md": "README.md", "changelog.md": "CHANGELOG.md"}


def _site_links(markdown: str) -> str:
    """README's links point into docs/ from the root; the site has them beside it."""
    markdown = re.sub(r"\]\(docs/", "](", markdown)
    return markdown.replace("](CHANGELOG.md)", "](changelog.md)")


def on_config(config: MkDocsConfig, **kwargs: Any) -> MkDocsConfig:
    docs = Path(config.docs_dir)

    def written(entry: Any) -> bool:
        if isinstance(entry, dict):
            ((_, value),) = entry.items()
            if isinstance(value, list):
                value[:] = [e for e in value if written(e)]
                return bool(value)
            entry = value
        return not isinstance(entry, str) or entry in GENERATED or (docs / entry).is_file()

    nav = [e for e in config.nav or [] if written(e)]
    listed = set(_paths(nav))
    unlisted = sorted(
        path
        for page in docs.rglob("*.md")
        if (path := page.relative_to(docs).as_posix()) not in listed | set(GENERATED)
    )
    guides = next(
        (v for e in nav if isinstance(e, dict) for k, v in e.items() if k == "Guides"), nav
    )
    guides.extend(unlisted)
    config.nav = nav
    return config


def _paths(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in _paths(value)]
    if isinstance(nav, list):
        return [p for entry in nav for p in _paths(entry)]
    return []


def on_files(files: Files, config: MkDocsConfig, **kwargs: Any) -> Files:
    for page, source in GENERATED.items():
        text = _site_links((ROOT / source).read_text())
        files.append(File.generated(config, page, content=text))
    return files
