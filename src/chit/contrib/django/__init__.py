"""Django's task framework (`django.tasks`) on chit: `ChitBackend` stores each
enqueued task as a chit job; `chit worker --django myproject.settings` runs
them. See docs/django.md."""

from chit.contrib.django.backend import ChitBackend

__all__ = ["ChitBackend"]
