"""Process-wide settings, made by entry points only (the CLI, `fpt.train`, `fpt.resume`), and
the signal handling of a training process (StopOnSignal).

Building a model or a task changes nothing outside itself; these calls do, so they are made
once per process by whoever owns the process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import signal
import sys
import threading
import time
from functools import cache
from pathlib import Path
from typing import Callable

# torch is imported where it is used: the `fpt` command reads this module before every command, --help
# and a usage error too, which need no torch (issue 59)

# glibc's malloc raises its mmap threshold (up to 32 MiB) each time a large block is freed, after
# which tensors of ever-changing sizes are carved from the heap and it fragments: ListOps batches
# of varying length grew a process from 2 to 24 GB in minutes. A fixed threshold returns those
# tensors to the system when freed, for about a tenth more time per step.
_M_MMAP_THRESHOLD = -3


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity where the OS has one (taskset, Slurm and
    container cpusets narrow it), else every core. Threads are split over these, not os.cpu_count()."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def thread_budget() -> int:
    """Threads the runs this process starts may share: OMP_NUM_THREADS where it is set (a user's or a
    test runner's cap, which torch honours in this process too), at most the usable cores. A sweep
    that gave each cell every core beside a second job would spin its threads against that job's."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()  # "4,2": OpenMP's outer level
    cap = int(first) if first.isascii() and first.isdigit() else 0
    return min(cap, usable_cores()) if cap > 0 else usable_cores()


def set_threads(threads: int | None) -> None:
    """Intra-op threads for torch (None: torch's default, one per core). Checked by TrainConfig."""
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def limit_heap_fragmentation(threshold: int = 1 << 20) -> bool:
    """Fix glibc's mmap threshold (for variable-length batches); False where there is no glibc."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "mallopt"):  # musl, macOS, Windows
        return False
    return libc.mallopt(_M_MMAP_THRESHOLD, threshold) == 1


def configure_process(threads: int | None, precision: str = "fp32") -> None:
    """What a training or evaluation process sets once, before it builds a task and a model (and
    `limit_heap_fragmentation()` once it knows its batches vary in length)."""
    set_threads(threads)
    warn_if_bf16_emulated(precision)
    # Subnormal floats take a slow path on x86 CPUs: an LSTM baseline on Bit Memory went from
    # 1.9 to over 7 s a step within 150 steps. Flushing them to zero keeps it at 1.9 s.
    import torch

    torch.set_flush_denormal(True)


def cpu_model() -> str:
    """The CPU's model name, for the records of timed benchmarks."""
    try:
        return next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


@cache
def cpu_flags() -> frozenset[str] | None:
    """The CPU's feature flags as Linux lists them in /proc/cpuinfo; None where there is no such file."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        return None
    return frozenset(cpuinfo.read_text(errors="replace").split())


def native_bf16() -> bool | None:
    """Whether this CPU computes bfloat16 natively (x86: AVX512-BF16 or AMX; Arm: the BF16
    extension); None where it cannot be told. Elsewhere bf16 is emulated and up to 20 times
    slower than fp32 (an AMD EPYC without AVX512-BF16: a Fashion-MNIST step 25 s against 1.15 s)."""
    flags = cpu_flags()
    if flags is not None:
        return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return None  # Apple M2 and later have BF16, M1 does not
    return None


def bf16_note() -> str:
    """One line for `fpt info`: whether bf16 is native, emulated or unknown on this CPU."""
    native = native_bf16()
    if native is None:
        return "bf16: cannot tell whether this CPU has native bfloat16"
    return (
        "bf16: native on this CPU"
        if native
        else "bf16: emulated on this CPU (no AVX512-BF16/AMX): much slower than fp32"
    )


def warn_if_bf16_emulated(precision: str) -> None:
    """Said once per process, on stderr, when a run asks for bf16 on a CPU that emulates it."""
    bf16 = precision in ("bf16", "int8-bf16")
    if bf16 and native_bf16() is False and not getattr(warn_if_bf16_emulated, "said", False):
        warn_if_bf16_emulated.said = True
        fallback = "int8" if precision == "int8-bf16" else "fp32"
        # measured: a Fashion-MNIST step 25 s against 1.15 s in fp32 (AMD EPYC without AVX512-BF16)
        print(
            f"fpt: warning: --precision {precision} computes in bf16, which is emulated on this CPU (no AVX512-BF16 "
            f"or AMX): it can be 20 times slower than fp32; use --precision {fallback} here",
            file=sys.stderr,
        )


# `progress` as one line per evaluation (a sweep: per cell) with no bar: what `fpt` shows where its
# output is not a terminal (nohup, CI, a notebook), where a redrawn bar would be noise
PROGRESS_LINES = "lines"

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# Signals this soon after the first are the same request by another route (see StopOnSignal):
# torchrun forwards a terminal's Ctrl-C and sends its SIGTERM within a moment of it.
SAME_REQUEST_S = 3.0


class StopOnSignal:
    """Ctrl-C or SIGTERM (a scheduler's preemption, `kill`, the end of a sitting) as a request to
    stop at the next step boundary, read from `signum`; a second request stops at once
    (KeyboardInterrupt). Installed by `with`, in the main thread only: elsewhere (a Ray worker)
    signals keep their own handling.

    One user Ctrl-C reaches a torchrun rank up to three times within a moment (the terminal's
    SIGINT, torchrun's forwarded SIGINT, then its SIGTERM): signals within SAME_REQUEST_S of
    the first count as that one request, so only a request made later stops at once.
    """

    def __init__(self, on_request: Callable[[int], None] | None = None):
        self.on_request = on_request
        self.signum: int | None = None
        self._first_at = 0.0
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for since `with` began."""
        return self.signum is not None

    def _request(self, signum: int, frame) -> None:
        if self.signum is not None:
            if time.monotonic() - self._first_at < SAME_REQUEST_S:
                return  # the same request, by another route
            raise KeyboardInterrupt  # asked twice: stop now, from the last checkpoint
        self.signum, self._first_at = signum, time.monotonic()
        if self.on_request is not None:
            self.on_request(signum)

    def __enter__(self) -> "StopOnSignal":
        self.signum = None
        self._previous = install_stop_handlers(self._request)
        if threading.current_thread() is threading.main_thread():
            _ACTIVE.append(self)
        return self

    def __exit__(self, *exc) -> None:
        restore_handlers(self._previous)
        self._previous = {}
        if _ACTIVE and _ACTIVE[-1] is self:
            _ACTIVE.pop()
            pass_request_on(self.signum, self._first_at)


# The StopOnSignal blocks the main thread is in, innermost last.
_ACTIVE: list[StopOnSignal] = []


def pass_request_on(signum: int | None, first_at: float) -> None:
    """A stop request an inner handler took (a Trainer's, a sweep's) goes on, as it ends, to the
    enclosing StopOnSignal (the `fpt` command's), so that its later copies (a sweep's SIGTERM after
    the group's Ctrl-C, late on a loaded machine) are taken there as the same request, not as a new
    one that would end the process another way."""
    outer = _ACTIVE[-1] if _ACTIVE else None
    if signum is not None and outer is not None and outer.signum is None:
        outer.signum, outer._first_at = signum, first_at


def install_stop_handlers(handler: Callable) -> dict[int, object]:
    """Point Ctrl-C and SIGTERM at `handler`, in the main thread only (elsewhere, a Ray worker say,
    signals keep their own handling); returns the handlers they had, for restore_handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {number: signal.signal(number, handler) for number in STOP_SIGNALS}


def restore_handlers(previous: dict[int, object]) -> None:
    """Give the signals in `previous` (install_stop_handlers' return) their handlers back."""
    for number, handler in previous.items():
        signal.signal(number, handler)


# Set for a child process that must not outlive its parent (a sweep's cell): the parent's pid.
PARENT_PID_ENV = "FPT_DIE_WITH_PARENT"
# Set for a sweep cell's `fpt train` process: where it records why it failed (fpt.cli.main writes it,
# fpt.experiments.sweep reads it); here, below both, so that a usage error's exit imports no sweep machinery.
FAILURE_RECORD_ENV = "FPT_FAILURE_RECORD"


def watch_parent(
    parent: int,
    also: int | None = None,
    poll_s: float = 0.5,
    say: str | None = None,
    kill_after_s: float | None = None,
) -> None:
    """The one watch of a parent: SIGTERM this process once `parent` is gone (this process re-parented,
    even after a kill -9) or `also`, a further process to outlive no longer than (a launcher with
    torchrun's agent between them), is; a training then stops after its step with a checkpoint, so a
    rerun resumes it. `say`: a line printed first; `kill_after_s`: SIGKILL that long after, for a
    process that must not linger. A thread polling pids rather than prctl(PR_SET_PDEATHSIG): it works
    beyond Linux, and it sees a parent that died before the watch began."""

    def gone() -> bool:
        if os.getppid() != parent:
            return True
        if also is not None and also != parent:
            try:
                os.kill(also, 0)
            except ProcessLookupError:
                return True
            except OSError:  # alive, owned by another user
                pass
        return False

    def watch() -> None:
        while not gone():
            time.sleep(poll_s)
        if say:
            print(say, file=sys.stderr)
        os.kill(os.getpid(), signal.SIGTERM)
        if kill_after_s is not None:
            time.sleep(kill_after_s)
            os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="fpt-parent-watch", daemon=True).start()
