"""The OpenAPI document `create_app` serves, made whole from what FastAPI builds:
request bodies as named components (pydantic leaves them inline, with `$defs`
no reader of the document can resolve), `POST /jobs` and each job of
`POST /workflows` spelled out per registered task (its kind and the payload
its model accepts), errors as JSON on every route, and the routers' tags.

A task's payload model is named by its kind (`Payload_<kind>`, its nested
models `Payload_<kind>_<Model>`), never by its class name, which could be
`ErrorOut` (chit's own error schema) or shared by two tasks (`Request`)."""

from __future__ import annotations

import copy
import re
from typing import Any

from fastapi import FastAPI

from chit.queue import Queue

TAGS = [
    {"name": "jobs", "description": "submit, follow, change, retry and cancel jobs"},
    {"name": "workflows", "description": "jobs linked by their dependencies, stored at once"},
    {"name": "schedules", "description": "jobs enqueued by cron rules and periods"},
    {"name": "flow control", "description": "limits per kind, pausing queues and kinds"},
    {"name": "queues", "description": "each queue's load and the live workers: for autoscalers"},
    {"name": "health", "description": "liveness and readiness"},
]

_COMPONENTS = "#/components/schemas/"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def document(app: FastAPI, queue: Queue) -> dict[str, Any]:
    """The schema, built once on first request."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    schema = FastAPI.openapi(app)
    errors_as_json(schema)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for item in schema["paths"].values():
        for operation in item.values():
            for content in operation.get("requestBody", {}).get("content", {}).values():
                content["schema"] = _named(content["schema"], components)
    submit = _submit_schema(queue, components)
    if submit is not None:
        schema["paths"]["/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"] = (
            submit
        )
        components["SubmitWorkflow"]["properties"]["jobs"]["items"] = submit
    used = {
        tag
        for item in schema["paths"].values()
        for op in item.values()
        for tag in op.get("tags", ())
    }
    schema["tags"] = [tag for tag in TAGS if tag["name"] in used]
    app.openapi_schema = schema
    return schema


def errors_as_json(schema: dict[str, Any]) -> None:
    """Errors are JSON on every route. FastAPI documents them in the route's
    own media type: text/plain for /metrics, which generated clients then
    read as text (schemathesis: "content type not documented")."""
    for item in schema["paths"].values():
        for operation in item.values():
            for status, response in operation.get("responses", {}).items():
                content = response.get("content")
                if status[0] in "45" and content and "application/json" not in content:
                    response["content"] = {"application/json": next(iter(content.values()))}


def _named(body: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """A body schema given inline (a route's `openapi_extra`) as a reference
    to a component named by its title, its `$defs` made components too."""
    body = _retarget(copy.deepcopy(body), "#/$defs/")
    for name, definition in body.pop("$defs", {}).items():
        _add(components, name, definition)
    title = body.get("title")
    if not isinstance(title, str) or _UNSAFE.search(title):
        return body
    _add(components, title, body)
    return {"$ref": _COMPONENTS + title}


def _add(components: dict[str, Any], name: str, schema: dict[str, Any]) -> None:
    if components.setdefault(name, schema) != schema:
        raise RuntimeError(f"two request schemas are both named {name!r}")


def _retarget(node: Any, prefix: str, to: str = _COMPONENTS) -> Any:
    """Every `$ref` under `prefix` pointed at `to` instead, in place."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(prefix):
            node["$ref"] = to + ref.removeprefix(prefix)
        for value in node.values():
            _retarget(value, prefix, to)
    elif isinstance(node, list):
        for value in node:
            _retarget(value, prefix, to)
    return node


def _submit_schema(queue: Queue, components: dict[str, Any]) -> dict[str, Any] | None:
    """One submission per task, `Submit_<kind>` (its kind a constant, its
    payload the task's model), as a `oneOf` told apart by `kind`; None with no
    tasks, where the plain `SubmitJob` stands."""
    if not queue.tasks:
        return None
    base = components["SubmitJob"]
    variants: dict[str, str] = {}
    taken = set(components)
    for kind, task in sorted(queue.tasks.items()):
        name = _free(_UNSAFE.sub("_", kind), taken)
        payload: dict[str, Any] = {
            "type": ["object", "null"],
            "description": "any JSON object; null or none is {}",
        }
        if task.payload_model is not None:
            model = task.payload_model.model_json_schema(
                ref_template=f"{_COMPONENTS}Payload_{name}_{{model}}"
            )
            for nested, definition in model.pop("$defs", {}).items():
                _component(components, f"Payload_{name}_{nested}", definition)
                taken.add(f"Payload_{name}_{nested}")
            _component(components, f"Payload_{name}", model)
            payload = {"$ref": f"{_COMPONENTS}Payload_{name}"}
        variant = copy.deepcopy(base)
        variant["properties"]["kind"] = {"const": kind, "type": "string"}
        variant["properties"]["payload"] = payload
        variant["required"] = ["kind", "payload"] if task.payload_model is not None else ["kind"]
        _component(components, f"Submit_{name}", variant)
        variants[kind] = f"{_COMPONENTS}Submit_{name}"
    return {
        "oneOf": [{"$ref": ref} for ref in variants.values()],
        "discriminator": {"propertyName": "kind", "mapping": variants},
    }


def _component(components: dict[str, Any], name: str, schema: dict[str, Any]) -> None:
    """Added under `name`, titled so too: generators name their classes by the
    title, which for a model is its class name (two tasks' `Request`s)."""
    schema["title"] = name
    components[name] = schema


def _free(name: str, taken: set[str]) -> str:
    """`name`, or `name_2`, `name_3`...: two kinds that differ only in the
    characters a component name cannot hold get a name each."""
    found, n = name, 1
    while {f"Submit_{found}", f"Payload_{found}"} & taken:
        n += 1
        found = f"{name}_{n}"
    taken |= {f"Submit_{found}", f"Payload_{found}"}
    return found
