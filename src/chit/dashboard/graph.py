"""A workflow drawn as server-rendered SVG: jobs in layers by depth (a job one
layer below its deepest dependency), each a box coloured by its state, edges as
lines from a dependency to its dependent. Beyond `NODE_LIMIT` jobs, the jobs of
one (depth, kind, state) are one box with their count, and the edges between
groups are drawn once, so a graph of 10,000 jobs stays a picture."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from chit.jobs import WorkflowJob

NODE_LIMIT = 300
BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 150, 34, 16, 46, 10
STATE_FILL = {
    "waiting": "#f4f0fb",
    "queued": "#eceef3",
    "running": "#e3ebfd",
    "succeeded": "#dff3e7",
    "failed": "#fbe3e1",
    "cancelled": "#f1f2f5",
}


@dataclass(frozen=True)
class Node:
    key: str
    depth: int
    label: str
    state: str
    href: str | None  # a job's page; None for a group
    count: int = 1


def depths(jobs: Sequence[WorkflowJob]) -> dict[str, int]:
    """Each job's depth: 0 without dependencies in the workflow, else one more
    than its deepest dependency (jobs are stored after their dependencies)."""
    depth: dict[str, int] = {}
    for job in jobs:
        inside = [depth[d] for d in job.depends_on if d in depth]
        depth[job.id] = 1 + max(inside) if inside else 0
    return depth


def layout(jobs: Sequence[WorkflowJob], job_href: str) -> tuple[list[Node], set[tuple[str, str]]]:
    """Nodes and edges (node keys): one node per job, or per group when large."""
    depth = depths(jobs)
    grouped = len(jobs) > NODE_LIMIT
    node_of: dict[str, str] = {}
    nodes: dict[str, Node] = {}
    for job in jobs:
        if grouped:
            key = f"{depth[job.id]}|{job.kind}|{job.state.value}"
            old = nodes.get(key)
            label = f"{job.kind} \u00d7{(old.count + 1) if old else 1}"
            nodes[key] = Node(
                key, depth[job.id], label, job.state.value, None, (old.count + 1) if old else 1
            )
        else:
            key = job.id
            label = f"{job.ref or job.id[-8:]} \u00b7 {job.kind}"
            nodes[key] = Node(key, depth[job.id], label, job.state.value, job_href + job.id)
        node_of[job.id] = key
    edges = {(node_of[d], node_of[job.id]) for job in jobs for d in job.depends_on if d in node_of}
    return list(nodes.values()), edges


def svg(jobs: Sequence[WorkflowJob], job_href: str) -> str:
    nodes, edges = layout(jobs, job_href)
    layers: dict[int, list[Node]] = {}
    for node in nodes:
        layers.setdefault(node.depth, []).append(node)
    at: dict[str, tuple[int, int]] = {}
    for depth, row in layers.items():
        for n, node in enumerate(row):
            at[node.key] = (PAD + n * (BOX_W + GAP_X), PAD + depth * (BOX_H + GAP_Y))
    width = PAD * 2 + max(len(r) for r in layers.values()) * (BOX_W + GAP_X) if layers else 0
    height = PAD * 2 + len(layers) * (BOX_H + GAP_Y)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="workflow-graph" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{len(jobs)} jobs in {len(layers)} layers">'
    ]
    for a, b in sorted(edges):
        (x1, y1), (x2, y2) = at[a], at[b]
        parts.append(
            f'<line x1="{x1 + BOX_W // 2}" y1="{y1 + BOX_H}" x2="{x2 + BOX_W // 2}" y2="{y2}" '
            'stroke="#9aa3b5" stroke-width="1"/>'
        )
    for node in nodes:
        x, y = at[node.key]
        fill = STATE_FILL.get(node.state, "#ffffff")
        label = escape(node.label if len(node.label) <= 22 else node.label[:21] + "\u2026")
        box = (
            f'<g class="node state-{node.state}"><title>{escape(node.label)}: {node.state}</title>'
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="4" fill="{fill}" '
            'stroke="#8a94a6"/>'
            f'<text x="{x + 6}" y="{y + 14}" font-size="11">{label}</text>'
            f'<text x="{x + 6}" y="{y + 28}" font-size="10" fill="#4a5263">{node.state}</text></g>'
        )
        if node.href is not None:
            box = f'<a href="{escape(node.href)}">{box}</a>'
        parts.append(box)
    parts.append("</svg>")
    return "".join(parts)
