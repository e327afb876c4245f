"""`GET /healthz` and `GET /readyz` (chit/api/health.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class Health(BaseModel):
    status: Literal["ok"]


class Ready(BaseModel):
    status: Literal["ready"]
    schema_version: int
