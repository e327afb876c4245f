"""A Django project for the tests of chit.contrib.django (tests/django)."""
