"""A run's sittings: each time a sweep starts or continues a cell's `fpt train`, one line in the run
directory's sittings.jsonl (when, from which step to which, how long, on what machine, its exit
status), so that a long run trained over several sessions says where and how often it was resumed.
A line may carry a "note", written by hand, saying why a sitting was unusual."""

from __future__ import annotations

import json
import time
from pathlib import Path

from fpt.core.devices import gpu_names
from fpt.core.errors import FptError
from fpt.core.runtime import bf16_note, cpu_model, usable_cores
from fpt.training.run_dir import RunDir

SITTINGS = "sittings.jsonl"


def reached_step(run: RunDir) -> int:
    """Where a resume of `run` starts: its checkpoint's step (a stop on SIGTERM or at --max-minutes
    saves one between evaluations), else its last evaluation's, else 0."""
    from fpt.training.checkpoint import checkpoint_step

    try:  # a damaged file is the resume's to report; here it only leaves the step unknown (0)
        if run.has_checkpoint:
            return checkpoint_step(run.checkpoint_path)
        records = run.read_metrics() if run.config_path.is_file() else []
    except FptError:
        return 0
    return records[-1]["step"] if records else 0


def this_machine() -> str:
    """The machine a sitting runs on, as its log line records it: its CPU and, where it has any, its
    GPUs (a run's config.json says which device the run itself used)."""
    gpus = gpu_names()
    return f"{cpu_model()}, {usable_cores()} cores; {bf16_note()}" + (f"; GPU: {', '.join(gpus)}" if gpus else "")


def log_sitting(run: RunDir, started: float, from_step: int, threads: int, exit_status: int) -> dict | None:
    """Append the sitting that began at `started` (time.time()) to the run's sittings.jsonl and
    return it; None where no run directory was made (fpt train refused to start) or the log
    could not be written."""
    if not run.path.is_dir():
        return None
    record = {
        "started": time.strftime("%Y-%m-%d %H:%M", time.gmtime(started)),
        "from_step": from_step,
        "to_step": reached_step(run),
        "wall_s": round(time.time() - started),
        "threads": threads,
        "machine": this_machine(),
        "exit": exit_status,
    }
    try:
        with open(run.path / SITTINGS, "a") as handle:
            handle.write(json.dumps(record) + "\n")
    except OSError:  # the log is a record of the run, never a reason for its cell to fail
        return None
    return record


def read_sittings(run_path: Path) -> list[dict]:
    """The run's logged sittings, oldest first; none where it has no log."""
    path = Path(run_path) / SITTINGS
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
