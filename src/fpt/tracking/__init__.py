"""Experiment tracking: a run's parameters, evaluations and results copied to MLflow, TensorBoard or
Weights & Biases (`--report-to mlflow,tensorboard,wandb`, Hugging Face Trainer's names).

metrics.jsonl stays the record of truth; a tracker only mirrors it, fed from one place
(fpt.Trainer.fit): the flattened config once, one call per evaluation (never per step),
the summary and the run's files at the end.

- DIR/tracking.json keeps each tracked run's id and the last step it holds. A resumed run continues
  the same tracked run and first catches it up from metrics.jsonl. Evaluations are sent only once
  their checkpoint is written, so a tracker never holds one that resuming will make again.
- A sweep is one parent run; each cell's `fpt train` nests under it through TRACKING_PARENT_ENV
  (MLflow nested runs, one W&B group, a TensorBoard subfolder per cell).
- Each backend is an optional extra, imported when its sink is made, so a missing one is refused
  (one line with its pip command) before anything trains. A tracker that fails mid-run warns once
  and is dropped for the rest of the process: training goes on, and resuming catches it up.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Iterable

from fpt.core.errors import FptError
from fpt.core.paths import write_json
from fpt.core.scores import is_subset
from fpt.tracking.sinks import (
    SINKS,
    SUBSET_PREFIX,
    Sink,
    check_sink_options,
    flatten,
    numbers,
    warn,
)

REPORT_TO = ("mlflow", "tensorboard", "wandb")
TRACKING_FILE = "tracking.json"
# Set by a sweep for its cells' `fpt train` processes: what each tracker needs to nest a run under it.
TRACKING_PARENT_ENV = "FPT_TRACKING_PARENT"


def parse_report_to(text: str | None) -> list[str]:
    """--report-to: a comma list of REPORT_TO, or none (the default)."""
    names = list(dict.fromkeys(name.strip() for name in (text or "none").split(",") if name.strip()))
    if names in ([], ["none"]):
        return []
    unknown = [name for name in names if name not in REPORT_TO]
    if unknown:
        raise FptError(
            f"--report-to: unknown tracker {unknown[0]!r}; give a comma list of {', '.join(REPORT_TO)}, or none"
        )
    return names


def build_tracker(
    report_to: str | None, tracking_uri: str | None = None, experiment: str | None = None, parent: str | None = None
) -> "Tracker":
    """The trackers `--report-to` names, each package imported now (a missing one: one line, exit 2).
    `parent`: a sweep's TRACKING_PARENT_ENV, for a cell's run."""
    names = parse_report_to(report_to)
    check_sink_options(names, tracking_uri, experiment)
    options = {"mlflow": (tracking_uri, experiment), "tensorboard": (), "wandb": (experiment,)}
    sinks = [SINKS[name](*options[name]) for name in names]
    cell_args = ["--report-to", ",".join(names)] if names else []
    cell_args += ["--tracking-uri", tracking_uri] if tracking_uri else []
    cell_args += ["--experiment", experiment] if experiment else []
    try:
        parents = json.loads(parent) if parent else {}
    except ValueError:
        parents = {}
    return Tracker(sinks, cell_args, parents)


class Tracker:
    """The sinks of one process, what Trainer.fit and the sweeps call; with no sinks it does nothing.
    Use: open (or `with tracker.open(...)`), log_evaluation per evaluation, finish, close."""

    def __init__(self, sinks: Iterable[Sink] = (), cell_args: list[str] | None = None, parents: dict | None = None):
        self.sinks = list(sinks)
        self.cell_args = cell_args or []  # the flags that give a sweep's cells the same trackers
        self.parents = parents or {}
        self.live: list[Sink] = []
        self.unclosed: list[Sink] = []  # failed mid-run, and could not be marked so then (a locked store)
        self.state: dict = {}
        self.directory: Path | None = None
        self._state_warned = False

    def open(self, directory: Path, params: dict, records: Iterable[dict] = (), role: str = "run") -> "Tracker":
        """Start (or continue) the tracked runs of `directory`, then send them the evaluations among
        `records` (metrics.jsonl) they do not hold yet. A tracker that cannot start is an FptError."""
        if not self.sinks:
            return self
        self.directory = Path(directory)
        self.state = _read_state(self.directory / TRACKING_FILE)
        for sink in self.sinks:
            try:
                logged = sink.open(self.directory, role, self.state.get(sink.name), self.parents.get(sink.name))
                self.live.append(sink)
                if logged is None:
                    sink.log_params(flatten(params))
            except FptError:  # already one line naming the fix (check_store)
                self.close()
                raise
            except Exception as exc:
                self.close()
                raise FptError(
                    f"cannot start {sink.name} tracking ({_first_line(exc)}); check its settings "
                    f"(--tracking-uri, environment) or leave it out of --report-to"
                ) from None
            self.state[sink.name] = {**sink.state, "logged_step": logged or 0}
        self._save()
        for record in records:
            self.log_evaluation(record["step"], record)
        return self

    def log_evaluation(self, step: int, record: dict) -> None:
        """One evaluation record (as in metrics.jsonl) to every tracker that lacks its step. A score
        of a subset only (--eval-subset; its split reads "test[:N]", or a forecast's "val[::k windows]")
        goes under its own names, so a whole-split score of the same step is kept beside it."""
        subset = is_subset(record)
        prefix, mark = (SUBSET_PREFIX, "logged_subset_step") if subset else ("", "logged_step")
        metrics = {prefix + k: v for k, v in numbers(record).items() if k != "step"}
        for sink in list(self.live):
            if step > self.state[sink.name].get(mark, 0) and self._call(
                sink, f"at step {step}", sink.log_evaluation, step, metrics
            ):
                self.state[sink.name][mark] = step
        self._save()

    def finish(self, summary: dict, files: Iterable[Path] = ()) -> None:
        """The summary and the files that exist among `files`; ends the tracked runs."""
        files = [Path(p) for p in files if Path(p).is_file()]
        for sink in list(self.live):
            self._call(sink, "at the end", sink.finish, summary, files)
        self.live = []
        self._close_unclosed("failed")  # its tracker failed: it lacks evaluations until a resume

    def close(self) -> None:
        """End any tracked run not finished (inside an `except`/`finally`, as failed or killed)."""
        status = "killed" if isinstance(sys.exc_info()[1], KeyboardInterrupt) else "failed"
        for sink in self.live:
            try:
                sink.close(status)
            except Exception:  # a tracker that fails while the run fails: the run's own error says more
                pass
        self.live = []
        self._close_unclosed(status)

    def _close_unclosed(self, status: str) -> None:
        """Try again to end the tracked runs dropped mid-run, so none is left RUNNING."""
        for sink in list(self.unclosed):
            try:
                sink.close(status)
                self.unclosed.remove(sink)
            except Exception:
                pass

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def cell_env(self) -> dict[str, str]:
        """The environment that nests a sweep cell's `fpt train` under this (open) parent run."""
        return {TRACKING_PARENT_ENV: json.dumps({s.name: s.child() for s in self.live})} if self.live else {}

    def _call(self, sink: Sink, when: str, method, *args) -> bool:
        try:
            method(*args)
            return True
        except Exception as exc:  # a tracker's failure must not stop training: the run directory has it all
            self.live.remove(sink)
            warn(
                f"{sink.name} tracking failed {when} ({_first_line(exc)}); training goes on without it, "
                f"{self.directory} keeps every evaluation, and resuming the run catches {sink.name} up"
            )
            try:
                sink.close("failed")
            except Exception:
                self.unclosed.append(sink)
            return False

    def _save(self) -> None:
        if self.directory is None:  # never opened: no trackers
            return
        try:
            write_json(self.directory / TRACKING_FILE, self.state)
        except OSError as exc:
            if not self._state_warned:
                self._state_warned = True
                warn(f"cannot write {self.directory / TRACKING_FILE} ({exc.strerror or exc}); tracking goes on")


def _read_state(path: Path) -> dict:
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (ValueError, UnicodeDecodeError):
        raise FptError(f"{path} is not valid JSON; delete it to start new tracked runs") from None
    records = state.values() if isinstance(state, dict) else [None]
    if not all(
        isinstance(record, dict)
        and all(type(record.get(key, 0)) is int for key in ("logged_step", "logged_subset_step"))
        for record in records
    ):
        raise FptError(
            f"{path} is not fpt's tracking state (a record per tracker, its logged steps); "
            "delete it to start new tracked runs"
        )
    return state


def _first_line(exc: BaseException) -> str:
    line = (str(exc).strip().splitlines() or [""])[0][:160]
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__
