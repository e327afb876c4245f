"""Worker processes: claim jobs under leases, run them, record one outcome each."""

from chit.worker.runner import Worker

__all__ = ["Worker"]
