"""Sweeps: a grid of runs from a YAML spec, several at a time, resumable, summarised in tables.

    name: modality                # optional
    grid:                         # every combination is one run (a "cell")
      task: [bit-xor, bit-memory]
      variant: [fpt, random]
      seed: [0, 1, 2]
    options:                      # the same for every cell: any `fpt train` option
      steps: 500
    parallel: 2                   # cells at once (the cores, or OMP_NUM_THREADS where smaller, are split)

In place of a grid, `cells:` names each cell (its run directory's name) and gives its own options,
task included (`mnist-seed0: {task: mnist, seed: 0, steps: 8000}`), over the shared `options`.
`runs: FOLDER` (relative to the spec's folder) puts the run directories there rather than in
SWEEP_DIR/runs/; `max_minutes: M` gives each cell at most M minutes a sitting (`fpt train
--max-minutes`): a cell still training then stops with a checkpoint ("stopped", not failed), and
running the sweep again continues it.

Each cell is a separate `fpt train --config SWEEP_DIR/logs/CELL.config.json` process writing its own
run directory: the file is the cell's TrainConfig as JSON (fpt.experiments.sweep_spec.cell_config),
so the options reach it with their types, none through a flag. A cell whose
summary.json exists is never run again; one that was killed or stopped is resumed from its
checkpoint (each sitting logged in its sittings.jsonl, fpt.experiments.sittings). A cell that
fails is recorded with its error and the sweep goes on.
Cells run in threads of this process (`LocalExecutor`, the default) or as Ray tasks
(fpt.experiments.ray_executor); either way each is `run_cell`, and the rows are the same.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Iterator, Protocol

from fpt.core.errors import FptError
from fpt.core.paths import atomic_write, write_json
from fpt.core.runtime import FAILURE_RECORD_ENV, PARENT_PID_ENV, PROGRESS_LINES, thread_budget, usable_cores
from fpt.core.scores import REGRESSION_METRICS, is_regression
from fpt.experiments.cell_records import cell_run, check_cells_unchanged, write_cell_records
from fpt.experiments.sittings import log_sitting, reached_step
from fpt.experiments.sweep_spec import Cell, SweepSpec, cell_config
from fpt.experiments.sweep_stop import STOPPED_EXITS, SweepStop
from fpt.tracking import Tracker
from fpt.training.run_dir import RunDir

# A row's status for a cell its sitting's time (max_minutes) stopped: neither done nor failed.
STOPPED = "stopped"
SCORE_PREFIX = "accuracy:"  # a row's accuracy on one split: "accuracy:test_fold_holdout"
# A regression run's row (a forecast) carries "mse:test" and "mae:test" (and "mse", "mae") instead.
# The splits a row's scores are listed in (homology: fold, superfamily, family); others after, by name.
KNOWN_SPLITS = (
    "heldout",
    "val",
    "valid",
    "test",
    "test_fold_holdout",
    "test_superfamily_holdout",
    "test_family_holdout",
)


def split_order(split: str | None) -> tuple[int, str]:
    """Known splits in KNOWN_SPLITS' order, others after."""
    return (KNOWN_SPLITS.index(split), "") if split in KNOWN_SPLITS else (len(KNOWN_SPLITS), str(split))


def _cell_status(run: RunDir) -> str:
    """done (summary.json written), resumable (a checkpoint) or new."""
    if run.is_finished:
        return "done"
    if run.has_checkpoint:
        return "resumable"
    return "new"


def failed_row(cell: Cell, run: RunDir, kind: str, error: str) -> dict:
    """The results row of a cell that failed: `kind` as fpt.core.errors names it, `error` its one line."""
    return {**cell.values, "status": "failed", "failure": kind, "error": error, "run_dir": str(run.path)}


# What a cell's `fpt train` adds to report to the sweep's trackers: its flags and environment (the
# parent run to nest under). Plain data, so it travels to a Ray worker as well.
CellTracking = tuple[list[str], dict[str, str]]


def cell_tracking(tracker: Tracker | None) -> CellTracking | None:
    """What each cell's `fpt train` needs to report to the sweep's tracker; None without one."""
    return None if tracker is None else (tracker.cell_args, tracker.cell_env())


def run_cell(
    cell: Cell,
    spec: SweepSpec,
    sweep_dir: Path,
    threads: int,
    tracking: CellTracking | None = None,
    stop: SweepStop | None = None,
) -> dict:
    """Run (or resume) one cell in its own process; never raises: a failure is a result, and the
    child records its kind in the run directory's failure.json (see fpt.cli.main). `stop`: the
    local sweep's (fpt.experiments.sweep_stop), which a signal asks to pause."""
    run = cell_run(sweep_dir, cell)
    log = sweep_dir / "logs" / f"{cell.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if _cell_status(run) != "done":
        failed = _run_train(cell, spec, run, log, threads, tracking, stop)
        if failed is not None:
            return failed
        if not run.is_finished and run.has_checkpoint and spec.max_minutes is not None:
            return _stopped_row(cell, run, f"max_minutes {spec.max_minutes:g} reached")
    try:
        summary = run.read_summary()
    except FptError as exc:
        summary, missing = None, str(exc)
    else:
        missing = f"{run.summary_path} is missing after the run ended"
    if summary is None:
        return failed_row(cell, run, "crash", missing)
    final = summary.get("final") or {}
    if is_regression(final):
        return _regression_row(cell, run, summary)
    tests, error = _test_scores(run, summary, log)
    if error and stop is not None and stop.signum is not None:  # its scoring was stopped: not a result yet
        return _stopped_row(cell, run, "its test split(s) not scored")
    split = next(iter(tests))
    return {
        **cell.values,
        "status": "done",
        "split": split,
        "accuracy": tests[split],
        **{f"{SCORE_PREFIX}{name}": accuracy for name, accuracy in tests.items()},
        "eval_split": final.get("split"),
        "eval_accuracy": final.get("accuracy"),
        "step": summary.get("step"),
        "reached_at": summary.get("target_reached_at_step"),
        "wall_time_s": summary.get("wall_time_s"),
        "run_dir": str(run.path),
        "failure": "",
        "error": error,
    }


def _run_train(
    cell: Cell,
    spec: SweepSpec,
    run: RunDir,
    log: Path,
    threads: int,
    tracking: CellTracking | None,
    stop: SweepStop | None,
) -> dict | None:
    """The cell's `fpt train` (or `--resume`), its output appended to `log`; None once it
    succeeded, else its failed row, or its stopped row where `stop` was asked for. The child dies
    with this process (fpt.core.runtime.watch_parent)."""
    if _cell_status(run) == "resumable":
        command = ["train", "--resume", str(run.path), "--threads", str(threads)]
    elif cell.runs is not None and run.read_metrics():  # the spec's folder is not the sweep's to clear
        return failed_row(
            cell,
            run,
            "usage",
            f"{run.path} holds a run that trained but has no checkpoint to resume; move it aside to run the cell again",
        )
    else:
        shutil.rmtree(run.path, ignore_errors=True)  # a cell killed before its first checkpoint, or failed
        command = ["train", "--config", str(_write_cell_config(cell, spec, log, threads)), "--out", str(run.path)]
    command += ["--no-progress"]
    if spec.max_minutes is not None:  # fpt ends the sitting itself: after a step, with a checkpoint, exit 0
        command += ["--max-minutes", str(spec.max_minutes)]
    run.failure_path.unlink(missing_ok=True)  # an earlier attempt's record
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        FAILURE_RECORD_ENV: str(run.failure_path),
        PARENT_PID_ENV: str(os.getpid()),
    }
    if tracking is not None:  # the same trackers, the cell's run nested under the sweep's
        command += tracking[0]
        env.update(tracking[1])
    started, from_step = time.time(), reached_step(run)  # 0 for a run not made yet
    with open(log, "a") as handle:
        argv, popen = [sys.executable, "-m", "fpt", *command], dict(stdout=handle, stderr=subprocess.PIPE, env=env)
        proc = subprocess.Popen(argv, text=True, **popen) if stop is None else stop.start(argv, text=True, **popen)
        if proc is None:  # the sweep was asked to stop before this cell began
            return _stopped_row(cell, run, f"not begun: the sweep stopped on {signal.Signals(stop.signum).name}")
        try:
            stderr = proc.communicate()[1]
        finally:
            if stop is not None:
                stop.finished(proc)
        handle.write(stderr)
    log_sitting(run, started, from_step, threads, proc.returncode)
    if proc.returncode == 0:
        return None
    failure = run.read_failure() or {}
    if stop is not None and stop.signum is not None and proc.returncode in STOPPED_EXITS and not failure:
        # paused: resumed (or begun anew) by the sweep's next sitting
        return _stopped_row(cell, run, f"the sweep stopped on {signal.Signals(stop.signum).name}")
    error = failure.get("message") or (stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
    return failed_row(cell, run, failure.get("kind", "crash"), error)


def _write_cell_config(cell: Cell, spec: SweepSpec, log: Path, threads: int) -> Path:
    """The cell's TrainConfig as JSON (`cell_config`, this sitting's threads in it), beside its log:
    what its `fpt train --config` runs, every option as typed in the spec, none through a flag."""
    path = log.with_name(f"{cell.name}.config.json")
    write_json(path, dataclasses.asdict(cell_config(spec, cell.values, threads=threads)))
    return path


def _stopped_row(cell: Cell, run: RunDir, why: str) -> dict:
    """The row of a cell stopped before its end (its sitting's time, `max_minutes`, or a signal to
    the sweep): not failed, continued when the sweep runs again."""
    step = reached_step(run)
    steps = run.read_config().get("steps") if run.config_path.is_file() else None
    return {
        **cell.values,
        "status": STOPPED,
        "step": step,
        "run_dir": str(run.path),
        "failure": "",
        "error": f"stopped at step {step} of {steps}: {why}; run the sweep again",
    }


def _regression_row(cell: Cell, run: RunDir, summary: dict) -> dict:
    """A regression run's row (a forecast): MSE and MAE, lower is better, on each test split the run
    scored once as it ended (summary.json "test"), or on the split it was watched on where it has none."""
    final, tested = summary["final"], summary.get("test") or {}
    tests = {name: tested[name] for name in sorted(tested, key=split_order)} or {final["split"]: final}
    split = next(iter(tests))
    return {
        **cell.values,
        "status": "done",
        "split": split,
        "mse": tests[split]["mse"],
        "mae": tests[split]["mae"],
        **{f"{metric}:{name}": result[metric] for name, result in tests.items() for metric in REGRESSION_METRICS},
        "eval_split": final["split"],
        "eval_mse": final["mse"],
        "eval_mae": final["mae"],
        "step": summary.get("step"),
        "reached_at": summary.get("target_reached_at_step"),
        "wall_time_s": summary.get("wall_time_s"),
        "run_dir": str(run.path),
        "failure": "",
        "error": "",
    }


def _test_scores(run: RunDir, summary: dict, log: Path) -> tuple[dict[str, float], str]:
    """A finished run's accuracy on each test split, scored once after training with `fpt evaluate
    --splits test` (during training it is watched on its validation split, e.g. ListOps' val); the
    split it was watched on where that is its test split or it has no other (bit tasks: held-out).
    Also the error where the test splits could not be scored (then the validation score stands)."""
    from fpt.tasks.base import is_test_split

    final = summary.get("final") or {}
    watched = {final.get("split"): final.get("accuracy")}
    if summary.get("test"):  # scored by the run itself when it ended
        return {
            name: r["accuracy"] for name, r in sorted(summary["test"].items(), key=lambda kv: split_order(kv[0]))
        }, ""
    if final.get("split") in ("heldout", None) or is_test_split(final["split"]):
        return watched, ""

    def scored() -> dict[str, float]:
        """The test splits' accuracies in evaluation.json, where it was made at the run's last step."""
        try:
            evaluation = run.read_evaluation() or {}
        except FptError:  # damaged: scored again
            return {}
        if evaluation.get("step") != summary.get("step"):  # made before the run was extended
            return {}
        return {name: r["accuracy"] for name, r in (evaluation.get("splits") or {}).items() if is_test_split(name)}

    if not scored():
        env = {k: v for k, v in os.environ.items() if k != FAILURE_RECORD_ENV}  # a finished run has not failed
        with open(log, "a") as handle:
            proc = subprocess.run(
                [sys.executable, "-m", "fpt", "evaluate", str(run.path), "--splits", "test"],
                stdout=handle,
                stderr=subprocess.PIPE,
                text=True,
                env={**env, "PYTHONUNBUFFERED": "1"},
            )
            handle.write(proc.stderr)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            return watched, f"test split(s) not scored, {final['split']} reported instead: {last}"
    tests = scored()
    return {name: tests[name] for name in sorted(tests, key=split_order)} or watched, ""


class Executor(Protocol):
    """Runs (or resumes) cells with `run_cell`, yielding (index in cells, row) as each finishes."""

    def __call__(
        self, cells: list[Cell], spec: SweepSpec, sweep_dir: Path, tracking: CellTracking | None = None
    ) -> Iterator[tuple[int, dict]]: ...

    def describe(self, parallel: int) -> str:
        """Where the runs ran, for the title of a table."""
        ...


class LocalExecutor:
    """`spec.parallel` cells at a time on this machine, its thread budget (runtime.thread_budget) split between them."""

    def __call__(
        self, cells: list[Cell], spec: SweepSpec, sweep_dir: Path, tracking: CellTracking | None = None
    ) -> Iterator[tuple[int, dict]]:
        threads = max(1, thread_budget() // spec.parallel)
        stopped = 0
        with SweepStop() as stop, ThreadPoolExecutor(spec.parallel) as pool:
            futures = {
                pool.submit(run_cell, cell, spec, sweep_dir, threads, tracking, stop): i for i, cell in enumerate(cells)
            }
            for future in as_completed(futures):
                row = future.result()
                stopped += row.get("status") == STOPPED
                yield futures[future], row
        stop.raise_if_stopped(stopped)

    def describe(self, parallel: int) -> str:
        """This machine and how its cores are split between runs."""
        return machine_description(parallel)


def run_sweep(
    spec: SweepSpec,
    sweep_dir: Path,
    progress: bool | str = True,
    executor: Executor | None = None,
    tracker: Tracker | None = None,
) -> list[dict]:
    """Run every cell not yet done (on this machine unless another executor is given); write
    results.csv, in the grid's order whichever cell finished first; return the rows.
    `tracker`: the sweep's open parent run (fpt.tracking), which each cell's run nests under."""
    from tqdm.auto import tqdm

    check_cells_unchanged(spec, sweep_dir)
    if spec.runs is not None:  # `runs:` first: a folder refused there leaves no sweep folder behind
        _make_folder(Path(spec.runs), "the spec's 'runs' folder", "name another folder under 'runs:'")
    _make_folder(sweep_dir, "the sweep folder", "give another --out")
    write_json(sweep_dir / "spec.json", spec.as_dict())
    cells = spec.cells()
    write_cell_records(spec, sweep_dir)
    rows: list[dict] = [{}] * len(cells)
    ended = 0
    try:
        with tqdm(total=len(cells), disable=progress is not True, unit="run", desc=f"sweep {spec.name}") as bar:
            for index, row in (executor or LocalExecutor())(cells, spec, sweep_dir, cell_tracking(tracker)):
                # "row": what tells this cell's table row apart (every grid value but task and seed)
                # (a named cell is told apart by its name)
                label = cells[index].given_name or (
                    ",".join(f"{k}={v}" for k, v in cells[index].values.items() if k not in ("task", "seed")) or "fpt"
                )
                rows[index] = {**row, "row": label}
                bar.set_postfix_str(cells[index].name, refresh=False)
                bar.update(1)
                if progress == PROGRESS_LINES:  # (a disabled bar counts nothing: count here)
                    ended += 1
                    print(f"sweep {spec.name}: {ended}/{len(cells)} {_ended(cells[index].name, row)}", flush=True)
    finally:  # a sweep paused by a signal (fpt.experiments.sweep_stop) writes its rows too, then ends
        if all(rows):
            write_results_csv(rows, sweep_dir / "results.csv")
    return rows


def _ended(name: str, row: dict) -> str:
    """A cell's end in a line, for output that is not a terminal: its status, score and time."""
    score = next((f"{k} {row[k]:.4g}" for k in ("accuracy", *REGRESSION_METRICS) if isinstance(row.get(k), float)), "")
    took = f" in {row['wall_time_s']:.0f} s" if isinstance(row.get("wall_time_s"), (int, float)) else ""
    return f"{name} {row.get('status', '?')}" + (f", {score}" if score else "") + took


def _make_folder(path: Path, what: str, fix: str) -> None:
    """Make `path` now, before any file of the sweep is written: a folder the system refuses
    (/proc/x, read-only, a file in the way) is one line naming it and the fix, not a cell's failure."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FptError(f"cannot create {what} {path} ({exc.strerror or exc}); {fix}") from None


def write_results_csv(rows: list[dict], path: Path) -> None:
    """The rows as CSV, every key any row has a column, written atomically."""
    columns = list(dict.fromkeys(k for row in rows for k in row))

    def write(tmp: Path) -> None:
        """Write the CSV to `tmp` (atomic_write then moves it into place)."""
        with open(tmp, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)

    atomic_write(path, write)


def machine_description(parallel: int) -> str:
    """This machine and how its cores are split between runs, for the title of a table."""
    import platform

    import torch

    return (
        f"{platform.processor() or platform.machine()}, {usable_cores()} cores, {parallel} run(s) at once "
        f"of {max(1, thread_budget() // parallel)} thread(s), torch {torch.__version__}"
    )


def sweep_outcome(rows: list[dict], sweep_dir: Path) -> tuple[dict, list[Path]]:
    """What a sweep's tracked parent run gets at the end: its runs counted by status, and its files."""
    counts = {
        "runs": len(rows),
        **{status: sum(r["status"] == status for r in rows) for status in ("done", "failed", "skipped")},
    }
    # any other status only where some rows have it (a cell max_minutes stopped, a rate probe that
    # diverged): a sweep without them reports what it always did
    for status in sorted({r["status"] for r in rows} - set(counts)):
        counts[status] = sum(r["status"] == status for r in rows)
    return counts, sorted(p for p in sweep_dir.glob("*") if p.suffix in (".csv", ".md", ".png", ".html"))
