"""Enqueue `noop` jobs one by one, printing each id once `enqueue` has returned.

    python -m support.e2e_writer COUNT [GO_FILE]   (tests/ on PYTHONPATH)

With GO_FILE, print 'ready' and wait until that file exists, so several
writers start at once."""

from __future__ import annotations

import os
import sys
import time

from support.e2e_app import queue


def main() -> None:
    count = int(sys.argv[1])
    go_file = sys.argv[2] if len(sys.argv) > 2 else None
    queue.store.migrate()
    if go_file is not None:
        print("ready", flush=True)
        while not os.path.exists(go_file):
            time.sleep(0.005)
    for i in range(count):
        job = queue.enqueue("noop", {"n": i})
        print(job.id, flush=True)


if __name__ == "__main__":
    main()
