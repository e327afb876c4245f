"""MkDocs hooks (mkdocs.yml): the site's front page is README.md and its
changelog CHANGELOG.md, read from the repository root so neither is copied;
nav entries for pages not written yet are left out instead of failing --strict."""

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

    config.nav = [e for e in config.nav or [] if written(e)]
    return config


def on_files(files: Files, config: MkDocsConfig, **kwargs: Any) -> Files:
    for page, source in GENERATED.items():
        text = _site_links((ROOT / source).read_text())
        files.append(File.generated(config, page, content=text))
    return files
