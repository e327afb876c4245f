"""The project's settings, read slowly: importing them creates the file
CHIT_TEST_LOADING, then waits for CHIT_TEST_GO to exist. A signal sent in
between reaches `chit worker --django` while Django sets up."""

import os
import time
from pathlib import Path

from django_project.settings import *  # noqa: F403

Path(os.environ["CHIT_TEST_LOADING"]).touch()
while not Path(os.environ["CHIT_TEST_GO"]).exists():
    time.sleep(0.01)  # the test's go-ahead: a file, as a child can see it
