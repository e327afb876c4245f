"""`Queue.output` and `Queue.follow_output`: a job's output (`JobContext.emit`)
read from the store, as a page or followed as it is written."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from chit.bounds import OUTPUT_PAGE_MAX
from chit.errors import InvalidRequest, JobNotFound
from chit.jobs import OutputItem

if TYPE_CHECKING:
    from chit.store import FullStore


class OutputReads:
    """The `Queue` methods that read output (a mixin: `Queue` has the store)."""

    @property
    def store(self) -> FullStore:
        raise NotImplementedError  # Queue's

    def output(
        self,
        job_id: str,
        after: int = 0,
        *,
        limit: int = OUTPUT_PAGE_MAX,
        tenant: str | None = None,
    ) -> list[OutputItem]:
        """Up to `limit` values the job emitted with `seq` above `after`, in order,
        each with its `attempt` and when it was written; [] when there are no
        more yet. Raises JobNotFound (also for another tenant's job when
        `tenant` is given) and InvalidRequest for a negative `after`."""
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise InvalidRequest(f"after is a seq (an integer >= 0), not {after!r}")
        if not 1 <= limit <= OUTPUT_PAGE_MAX:
            raise InvalidRequest(f"limit is 1 to {OUTPUT_PAGE_MAX}, not {limit!r}")
        items = self.store.output(job_id, after, limit, tenant)
        if items is None:
            raise JobNotFound(job_id)
        return items

    def follow_output(
        self, job_id: str, after: int = 0, *, tenant: str | None = None
    ) -> Iterator[OutputItem]:
        """Every value after `after`, as it is written, until the job has
        finished and all of its output was read (woken by the store's output
        feed, with a look at the job's state at least once a second)."""
        feed = self.store.output_feed()
        try:
            while True:
                job = self.store.get(job_id, tenant)  # before the read: a finished
                if job is None:  # job's output is all written by then
                    raise JobNotFound(job_id)
                items = self.output(job_id, after, tenant=tenant)
                yield from items
                if items:
                    after = items[-1].seq
                    continue
                if job.state.terminal:
                    return
                feed.wait(1.0)  # another job's output wakes it too: a look costs little
        finally:
            feed.close()
