"""Two databases, each with a chit task backend in it: "default" on a SQLite
file (CHIT_TEST_DJANGO_SQLITE) and "pg" on PostgreSQL (CHIT_TEST_DJANGO_PG, a
postgresql:// URL). The tests and the worker processes they start read the
same variables, so both sides reach the same databases."""

import os
from urllib.parse import urlsplit

SECRET_KEY = "chit-tests-only"
USE_TZ = True
TIME_ZONE = "UTC"
# chit.contrib.django: for manage.py chit_worker (the backend needs no app).
INSTALLED_APPS = ["django_project.taskapp", "chit.contrib.django"]
try:  # the backport on Django 5.2 is an app of its own (its system checks)
    import django_tasks  # noqa: F401

    INSTALLED_APPS.append("django_tasks")
except ImportError:
    pass

_pg = urlsplit(os.environ.get("CHIT_TEST_DJANGO_PG", "postgresql://postgres@127.0.0.1:5432/test"))
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("CHIT_TEST_DJANGO_SQLITE", "django.sqlite3"),
        # Takes the write lock at BEGIN, as chit's own transactions do: a
        # transaction that read first cannot then fail to write (SQLITE_BUSY).
        "OPTIONS": {"transaction_mode": "IMMEDIATE"},
    },
    "pg": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _pg.path.lstrip("/"),
        "USER": _pg.username or "",
        "PASSWORD": _pg.password or "",
        "HOST": _pg.hostname or "",
        "PORT": str(_pg.port or ""),
    },
}

_QUEUES = ["default", "emails", "ordered", "retries"]
TASKS = {
    alias: {
        "BACKEND": "chit.contrib.django.ChitBackend",
        "QUEUES": _QUEUES,
        # One attempt: a task that raises is FAILED at once, as Django's own backends do.
        "OPTIONS": {"DATABASE": alias, "MAX_ATTEMPTS": 1},
    }
    for alias in DATABASES
}
# Two attempts, for the tests of retries (queue "retries").
for _alias in DATABASES:
    TASKS[f"{_alias}_retrying"] = {
        "BACKEND": "chit.contrib.django.ChitBackend",
        "QUEUES": ["retries"],
        "OPTIONS": {"DATABASE": _alias, "MAX_ATTEMPTS": 2},
    }
# chit in a database of its own, not joined to Django's transactions: a job is
# stored at once. (On the SQLite file Django writes to, chit's write would wait
# for Django's transaction to end, which waits for the enqueue: SQLite has one
# writer at a time.)
TASKS["unjoined"] = {
    "BACKEND": "chit.contrib.django.ChitBackend",
    "QUEUES": _QUEUES,
    "OPTIONS": {
        "DATABASE_URL": f"sqlite:///{os.path.abspath(DATABASES['default']['NAME'])}-chit.db",
        "MAX_ATTEMPTS": 1,
    },
}
