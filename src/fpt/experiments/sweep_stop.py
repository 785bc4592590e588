"""Pausing a sweep the way one pauses a run: Ctrl-C or SIGTERM to `fpt sweep` or `fpt reproduce`
passes SIGTERM on to each cell training on this machine, which stops after its step with a
checkpoint; the sweep waits for them, logs their sittings, starts no other cell, writes its
results.csv (those cells "stopped") and exits with 128 + the signal. The same command continues.

Without this, a signal ended the sweep at once: Python's subprocess.run kills its child 0.25 s after
a Ctrl-C (before the child has saved its checkpoint), and a SIGTERM left no sitting in the log.
A second request, later than the first by more than a moment, stops the sweep at once (the cells
then stop with it, fpt.runtime.die_with_parent), as it stops a run.
"""

from __future__ import annotations

import signal
import subprocess
import threading

from fpt.errors import StopRequested
from fpt.runtime import StopOnSignal


class SweepStop:
    """The cells' processes running now, and whether the sweep was asked to stop. Used by `with`
    in the thread that runs the sweep (signal handlers are the main thread's); `start` and
    `finished` from the threads that run its cells."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self._signal = StopOnSignal(self._pass_on)

    @property
    def signum(self) -> int | None:
        """The signal that asked the sweep to stop; None while none has."""
        return self._signal.signum

    def __enter__(self) -> "SweepStop":
        self._signal.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._signal.__exit__(*exc)

    def start(self, command: list[str], **popen) -> subprocess.Popen | None:
        """Start a cell's process, or None once a stop was asked for (the cell is not begun)."""
        with self._lock:
            if self.signum is not None:
                return None
            process = subprocess.Popen(command, **popen)
            self._running.add(process)
            return process

    def finished(self, process: subprocess.Popen) -> None:
        """The cell's process has ended: nothing to pass a signal on to."""
        with self._lock:
            self._running.discard(process)

    def _pass_on(self, signum: int) -> None:
        # a Ctrl-C reached the cells already (the terminal's process group); SIGTERM to the sweep
        # alone did not. A cell counts both as one request (fpt.runtime.SAME_REQUEST_S).
        with self._lock:
            for process in self._running:
                try:
                    process.send_signal(signal.SIGTERM)
                except ProcessLookupError:  # it ended a moment ago
                    pass

    def raise_if_stopped(self, stopped: int) -> None:
        """After the sweep has written its rows: end the command (fpt.cli.main: 128 + the signal) if a
        signal stopped it, naming how many cells wait to be continued."""
        if self.signum is not None:
            name = signal.Signals(self.signum).name
            raise StopRequested(
                f"sweep stopped on {name}: {stopped} runs wait, each from its checkpoint; "
                "run the same command again to continue",
                self.signum,
            )
