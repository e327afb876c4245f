"""In INSTALLED_APPS ("chit.contrib.django") only for `manage.py chit_worker`;
the backend itself needs no app."""

from django.apps import AppConfig


class ChitConfig(AppConfig):
    name = "chit.contrib.django"
    label = "chit"  # "django", the package's own name, would read as Django's
    verbose_name = "chit"
