"""Pausing a sweep the way one pauses a run: Ctrl-C or SIGTERM to `fpt sweep` or `fpt reproduce`
passes SIGTERM on to each cell training on this machine, which stops after its step with a
checkpoint; the sweep waits for them, logs their sittings, begins no other cell, writes its
results.csv (those cells "stopped") and exits with 128 + the signal. The same command continues.
A second request, later than the first by more than a moment, is passed on too: the cells then
stop at once, from their last checkpoints, as a run does when asked twice.

Without this, a Ctrl-C ended the sweep's wait but its thread pool went on to begin every queued
cell, and a SIGTERM ended the sweep at once, its running cell stopped by the parent-death signal
(fpt.core.runtime.watch_parent) with no sitting logged.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

from fpt.core.errors import StopRequested
from fpt.core.runtime import (
    SAME_REQUEST_S,
    STOP_SIGNALS,
    install_stop_handlers,
    pass_request_on,
    restore_handlers,
)

# how a cell's `fpt train` ends when a stop request reached it: 128 + the signal (fpt.cli.main), or
# killed by the signal itself before its own handler was installed
STOPPED_EXITS = {code for number in STOP_SIGNALS for code in (128 + number, -number)}


class SweepStop:
    """The cells' processes running now, and whether the sweep was asked to stop. Used by `with`
    in the thread that runs the sweep (signal handlers are the main thread's; elsewhere signals keep
    their own handling); `start` and `finished` from the threads that run its cells."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the signal that asked the sweep to stop
        self._first_at = 0.0
        self._lock = threading.Lock()  # taken by the cells' threads only: a handler must not wait
        self._running: set[subprocess.Popen] = set()
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "SweepStop":
        self._previous = install_stop_handlers(self._request)
        return self

    def __exit__(self, *exc) -> None:
        restore_handlers(self._previous)
        self._previous = {}
        pass_request_on(self.signum, self._first_at)

    def start(self, command: list[str], **popen) -> subprocess.Popen | None:
        """Start a cell's process, or None once a stop was asked for (the cell is not begun)."""
        with self._lock:
            if self.signum is not None:
                return None
            process = subprocess.Popen(command, **popen)
            self._running.add(process)
        if self.signum is not None:  # asked while it started: the handler may not have seen it
            _terminate(process)
        return process

    def finished(self, process: subprocess.Popen) -> None:
        """The cell's process has ended: nothing to pass a signal on to."""
        with self._lock:
            self._running.discard(process)

    def _request(self, signum: int, frame) -> None:
        now, running = time.monotonic(), list(self._running)  # a copy: the cells' threads change the set
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum, self._first_at = signum, now
            _say(
                f"fpt: {name}: the sweep stops once its running cells ({len(running)}) have saved a checkpoint "
                "(each after its step); ask again to stop them at once"
            )
        elif now - self._first_at < SAME_REQUEST_S:
            return  # the same request by another route: a terminal's Ctrl-C reached the cells already
        else:
            _say(f"fpt: {name} again: stopping the running cells at once, from their last checkpoints")
        for process in running:
            _terminate(process)

    def raise_if_stopped(self, unfinished: int) -> None:
        """After the sweep has written its rows: end the command (fpt.cli.main: 128 + the signal) if a
        signal stopped it, naming how many cells it left unfinished."""
        if self.signum is not None:
            raise StopRequested(
                f"sweep stopped on {signal.Signals(self.signum).name} with {unfinished} runs unfinished; "
                "run the same command again to continue them",
                self.signum,
            )


def _terminate(process: subprocess.Popen) -> None:
    try:
        process.send_signal(signal.SIGTERM)
    except ProcessLookupError:  # it ended a moment ago
        pass


def _say(line: str) -> None:
    # os.write, not print: a handler that interrupts a print to stderr (the progress bar) may not print
    try:
        os.write(2, (line + "\n").encode())
    except OSError:
        pass
