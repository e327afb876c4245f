"""A job's output on the SQL stores (`Output`): the values `JobContext.emit`
writes, in batches fenced on the lease, and their reads."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from chit.jobs import OutputItem
from chit.store.capabilities import Output
from chit.store.sql.base import SQLBase


class OutputSQL(SQLBase, Output):
    def append_output(
        self,
        job_id: str,
        lease_token: str,
        values: Sequence[str],
        size: int,
        now: datetime | None = None,
    ) -> int | None:
        params = {
            "id": job_id,
            "token": lease_token,
            "n": len(values),
            "bytes": size,
            "items": self.d.array(list(values)),
            "now": self.d.now(now),
        }
        with self._tx() as conn:
            row = conn.execute(self.Q["append_output"], params).fetchone()
            if row is None:
                return None
            last = int(row["output_seq"])
            if "insert_output" in self.Q:
                first = {"first": last - len(values) + 1, "attempt": row["attempts"]}
                conn.execute(self.Q["insert_output"], params | first)
        return last

    def output_used(self, job_id: str) -> tuple[int, int]:
        rows = self._rows(self.Q["output_used"], {"id": job_id, "tenant": None})
        return (int(rows[0]["output_seq"]), int(rows[0]["output_bytes"])) if rows else (0, 0)

    def output(
        self, job_id: str, after: int = 0, limit: int = 100, tenant: str | None = None
    ) -> list[OutputItem] | None:
        with self._read() as conn:
            known = conn.execute(self.Q["output_used"], {"id": job_id, "tenant": tenant})
            if known.fetchone() is None:
                return None
            params = {"id": job_id, "after": after, "limit": limit}
            rows = conn.execute(self.Q["output"], params).fetchall()
        loads = self.d.loads
        return [
            OutputItem(r["seq"], r["attempt"], loads(r["data"]), self._at(r["at"])) for r in rows
        ]

    def listen_to(self, job_ids: Sequence[str]) -> None:
        if job_ids and "mark_listened" in self.Q:  # SQLite's feed sees every commit
            self._changed("mark_listened", {"ids": self.d.array(list(job_ids))})

    def output_heads(self, job_ids: Sequence[str]) -> dict[str, int]:
        if not job_ids:
            return {}
        rows = self._rows(self.Q["output_heads"], {"ids": self.d.array(list(job_ids))})
        return {r["id"]: int(r["output_seq"]) for r in rows}
