"""`/docs`: the API reference as one HTML page rendered from the OpenAPI schema
on the server. FastAPI's Swagger UI loads its script and styles from a CDN,
which a machine without Internet access (or a strict proxy) cannot reach and
which runs third-party code next to the API; this page needs no script and
loads nothing else. `/openapi.json` stays the schema for tools."""

from __future__ import annotations

import json
import re
from html import escape
from typing import Any

_CODE = re.compile(r"`([^`]+)`")
METHODS = ("get", "head", "post", "put", "patch", "delete", "options")

STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; margin: 0 auto; max-width: 62rem;
  padding: 1rem 1.5rem; color: #1f2430; }
h1 { margin-bottom: 0; } h2 { margin-top: 2.5rem; border-bottom: 1px solid #d9dde5; }
h3 { margin: 1.8rem 0 .3rem; font-size: 1.05rem; } h3 code { font-size: 1rem; }
.method { display: inline-block; min-width: 4.2em; text-align: center; border-radius: 4px;
  padding: 0 .4em; color: #fff; background: #4b5568; font-size: .85rem; }
.post { background: #2f7d4f; } .get { background: #2c5fa8; } .put { background: #8a5a12; }
.delete { background: #a83232; }
table { border-collapse: collapse; margin: .4rem 0; }
td, th { border: 1px solid #d9dde5; padding: .2rem .5rem; text-align: left; vertical-align: top; }
pre { background: #f4f6f9; padding: .6rem; overflow-x: auto; font-size: .85rem; }
nav a { margin-right: .8rem; } .muted { color: #5c6578; }
"""


def render(schema: dict[str, Any]) -> str:
    info = schema.get("info", {})
    operations = [
        (path, method, op)
        for path, ops in schema.get("paths", {}).items()
        for method, op in ops.items()
        if method in METHODS
    ]
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{escape(info.get('title', 'API'))} API reference</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{escape(info.get('title', 'API'))} API reference</h1>",
        f"<p class='muted'>version {escape(str(info.get('version', '')))}; the schema for tools "
        "is <a href='openapi.json'>openapi.json</a></p>",
        _text(info.get("description", "")),
        "<nav>",
        *(f"<a href='#{_anchor(m, p)}'>{m.upper()} {escape(p)}</a>" for p, m, _ in operations),
        "</nav><h2>Routes</h2>",
        *(_operation(path, method, op) for path, method, op in operations),
        "<h2>Schemas</h2>",
    ]
    for name, body in sorted(schema.get("components", {}).get("schemas", {}).items()):
        parts.append(f"<h3 id='schema-{escape(name)}'>{escape(name)}</h3>")
        parts.append(f"<pre>{escape(json.dumps(body, indent=2, ensure_ascii=False))}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _operation(path: str, method: str, op: dict[str, Any]) -> str:
    parts = [
        f"<h3 id='{_anchor(method, path)}'><span class='method {method}'>{method.upper()}</span> "
        f"<code>{escape(path)}</code> {escape(op.get('summary', ''))}</h3>",
        _text(op.get("description", "")),
    ]
    if op.get("security"):
        parts.append("<p class='muted'>Authorization: Bearer KEY, when keys are configured</p>")
    params = op.get("parameters", [])
    if params:
        parts.append("<table><tr><th>parameter</th><th>in</th><th>type</th><th>meaning</th></tr>")
        for p in params:
            required = " (required)" if p.get("required") else ""
            parts.append(
                f"<tr><td><code>{escape(p['name'])}</code>{required}</td><td>{escape(p['in'])}"
                f"</td><td>{_type(p.get('schema', {}))}</td>"
                f"<td>{escape(p.get('description', ''))}</td></tr>"
            )
        parts.append("</table>")
    for media, content in op.get("requestBody", {}).get("content", {}).items():
        parts.append(f"<p>Body ({escape(media)}): {_type(content.get('schema', {}))}</p>")
        parts.append(_kinds(content.get("schema", {})))
    rows = []
    for status, answer in op.get("responses", {}).items():
        kinds = ", ".join(
            f"{escape(media)} {_type(c.get('schema', {}))}"
            for media, c in answer.get("content", {}).items()
        )
        rows.append(
            f"<tr><td>{escape(status)}</td><td>{escape(answer.get('description', ''))}</td>"
            f"<td>{kinds}</td></tr>"
        )
    if rows:
        parts.append("<table><tr><th>answer</th><th>meaning</th><th>body</th></tr>")
        parts.extend(rows)
        parts.append("</table>")
    return "\n".join(parts)


def _kinds(schema: dict[str, Any]) -> str:
    """A body told apart by `kind` (`POST /jobs` with tasks registered): each
    kind, with the schema of its submission."""
    mapping = schema.get("discriminator", {}).get("mapping", {})
    if not mapping:
        return ""
    rows = "".join(
        f"<tr><td><code>{escape(kind)}</code></td><td>{_type({'$ref': ref})}</td></tr>"
        for kind, ref in mapping.items()
    )
    return f"<table><tr><th>kind</th><th>body</th></tr>{rows}</table>"


def _type(schema: dict[str, Any]) -> str:
    """A schema in a few words: a link to a named one, a type, or alternatives."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"<a href='#schema-{escape(name)}'>{escape(name)}</a>"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_type(s) for s in schema[key])
    if schema.get("type") == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if "type" in schema:
        return escape(str(schema["type"]))
    return "any"


def _text(text: str) -> str:
    """Paragraphs, with `code` as code: the Markdown the descriptions use."""
    paragraphs = (escape(p.strip()) for p in text.split("\n\n") if p.strip())
    return "".join("<p>" + _CODE.sub(r"<code>\1</code>", p) + "</p>" for p in paragraphs)


def _anchor(method: str, path: str) -> str:
    return escape(f"{method}-{path}".replace("/", "-").replace("{", "").replace("}", ""))
