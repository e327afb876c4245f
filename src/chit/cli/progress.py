"""What `chit wait` (and `submit --wait`) shows, whether it reads the database or
polls the HTTP API: the state and a progress bar on stderr (redrawn in place on
a terminal, a line per change otherwise, nothing with --json), then the result
on stdout or the error on stderr, and the exit code."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from chit.cli import output
from chit.jobs import State

# The job failed, was cancelled, or the wait timed out.
EXIT_JOB_FAILED = 1


class WaitDisplay:
    def __init__(self, as_json: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.as_json = as_json
        self.live = self.stream.isatty() and not as_json
        self.state: State | None = None
        self._line = ""

    def update(self, state: State, done: int | None, total: int | None) -> None:
        self.state = state
        line = f"{state.value} {output.progress_bar(done, total)}".rstrip()
        if self.live:
            self.stream.write("\r" + line.ljust(len(self._line)))
            self.stream.flush()
        elif line != self._line and not self.as_json:
            print(line, file=self.stream, flush=True)
        self._line = line

    def timed_out(self, timeout: float | None) -> int:
        self._end_line()
        state = self.state.value if self.state is not None else "unknown"
        print(f"chit: still {state} after {timeout}s", file=self.stream)
        return EXIT_JOB_FAILED

    def finished(self, state: State, result: Any, error: str | None, as_json: Any) -> int:
        """`as_json`: what --json prints, the whole job as the source has it."""
        self._end_line()
        if self.as_json:
            output.print_json(as_json)
        elif state is State.SUCCEEDED:
            print(json.dumps(result, indent=2, ensure_ascii=False))
        else:
            print(f"{state.value}: {(error or '').split(chr(10), 1)[0]}", file=self.stream)
        return 0 if state is State.SUCCEEDED else EXIT_JOB_FAILED

    def _end_line(self) -> None:
        if self.live:
            self.stream.write("\n")
