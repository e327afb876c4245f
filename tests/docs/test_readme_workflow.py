"""The README's Workflows example, run as written: every job it enqueues is
of one workflow, drawn with its edges (it once drew `merge -> merge`, its first
jobs enqueued outside the workflow)."""

from __future__ import annotations

import re
from pathlib import Path

import chit
from chit.dashboard import graph
from chit.settings import Settings

README = Path(__file__).resolve().parents[2] / "README.md"


def example() -> str:
    section = README.read_text().split("\n## Workflows\n", 1)[1]
    return section.split("```python\n", 1)[1].split("\n```", 1)[0]


def test_the_readme_workflow_is_one_graph_with_the_edges_it_says(tmp_path: Path) -> None:
    queue = chit.Queue(settings=Settings(database_url=f"sqlite:///{tmp_path / 'chit.db'}"))
    for kind in ("fetch", "merge", "notify", "report"):
        queue.task(kind)(lambda job, body: None)
    scope = {"chit": chit, "queue": queue, "u": "https://a.example", "v": "https://b.example"}
    exec(compile(example(), "README.md (Workflows)", "exec"), scope)
    view = queue.workflow(scope["wf"].id)
    name = {j.id: j.ref or j.kind for j in view.jobs}
    edges = sorted((name[d], name[j.id]) for j in view.jobs for d in j.depends_on)
    assert edges == [("a", "m"), ("b", "m"), ("m", "notify"), ("m", "report")]
    assert [j.kind for j in view.jobs] == ["fetch", "fetch", "merge", "notify", "report"]
    drawn = re.findall(r'font-size="11">([^<]*)<', graph.svg(view.jobs, "/ui/jobs/"))
    assert drawn[:3] == ["a \u00b7 fetch", "b \u00b7 fetch", "m \u00b7 merge"]
    queue.close()
