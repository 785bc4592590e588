"""The run directory: every file of a run, its name and its reader, in one place (`RunDir`).

    config.json      the TrainConfig that rebuilds the run
    metrics.jsonl    one record per evaluation (the record of truth for curves and tables)
    summary.json     written once the run ends: final evaluation, steps, wall time
    checkpoint.safetensors   trained tensors, Adam moments, step, RNG (fpt.training.checkpoint)
    evaluation.json  `fpt evaluate`'s per-split results
    failure.json     why a sweep cell did not finish: {"kind": ..., "message": ...} (fpt.core.errors kinds)
    tracking.json, tb/   the tracked runs' ids (MLflow, W&B) and TensorBoard's events (fpt.tracking)

Files are written atomically (fpt.core.paths.atomic_write), so a killed run never leaves half a file.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from fpt.core.errors import FptError, check_type
from fpt.core.jsonfile import read_json_object
from fpt.core.paths import nearest_existing, remove_stale_temporaries, write_json, write_text
from fpt.core.scores import REGRESSION_METRICS, is_regression, is_subset

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, a second writer is not refused
    fcntl = None


def whole_split(records: list[dict]) -> list[dict]:
    """The records that scored a whole split: what tables, curves and convergence read."""
    return [r for r in records if not is_subset(r)]


# What a finished run's figures must be, for everything that reads them (tables, reports, exports).
_SUMMARY_FIELDS = {"step": (int,), "wall_time_s": (int, float), "trained_params": (int,), "total_params": (int,)}
_RESULT_FIELDS = {"split": (str,), "accuracy": (int, float), "loss": (int, float), "examples": (int,)}


class RunDir:
    """A run directory: the name of each file a run keeps (config, metrics, summary, checkpoint, evaluation, failure),
    its readers and writers, and the lock that keeps a second process out while one writes."""

    CONFIG = "config.json"
    METRICS = "metrics.jsonl"
    SUMMARY = "summary.json"
    CHECKPOINT = "checkpoint.safetensors"
    EVALUATION = "evaluation.json"
    FAILURE = "failure.json"
    LOCK = ".lock"
    # The one folder of a run that holds runs of its own: those derived from it (`fpt backtest`'s
    # origins, each the run's config at another cutoff), kept with it and read by no table as its peers.
    DERIVED = "backtest"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = None  # the open lock file while this process writes the run
        self._created = False  # made by this process (so `remove` may delete the folder itself)

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    # --- making and finding ---------------------------------------------------------------

    @staticmethod
    def default_path(task: str, label: str, root: Path = Path("runs")) -> Path:
        """runs/<task>-<label>-<time>: backbone paths are reduced to their last component."""
        label = Path(label.rstrip("/")).name.replace("/", "_")
        return root / f"{task.replace(':', '_').replace('/', '_')}-{label}-{time.strftime('%Y%m%d-%H%M%S')}"

    @classmethod
    def check_creatable(cls, path: str | Path) -> None:
        """Refuse, before anything is loaded, a run directory that could not be made here."""
        path = Path(path)
        too_long = [part for part in path.parts if len(part.encode()) > 255]
        if too_long:
            raise FptError(f"--out has a name of {len(too_long[0].encode())} bytes; the filesystem allows 255")
        if path.exists() and not path.is_dir():
            raise FptError(f"--out {path} is a file; give a directory for the run")
        if path.is_dir() and any(path.iterdir()):
            raise FptError(f"run directory {path} already exists and is not empty; pick another --out or --resume it")
        ancestor = nearest_existing(path)
        if not ancestor.is_dir():
            raise FptError(f"--out {path} is under {ancestor}, which is a file, not a folder")
        inside = next(
            (p for p in path.resolve().parents if (p / cls.CONFIG).is_file() and (p / cls.METRICS).exists()), None
        )
        derived = inside is not None and path.resolve().relative_to(inside).parts[:1] == (cls.DERIVED,)
        if inside is not None and not derived:  # a run in a run: its files would be taken for the outer's
            raise FptError(f"--out {path} is inside the run directory {inside}; put the new run beside it, not in it")
        if not os.access(ancestor, os.W_OK | os.X_OK):
            raise FptError(f"cannot create {path}: {ancestor} is not writable; pick another --out")

    @classmethod
    def create(cls, path: str | Path) -> "RunDir":
        """Make the directory and take its lock (see `lock`)."""
        cls.check_creatable(path)
        path = Path(path)
        existed = path.is_dir()
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise FptError(f"cannot create run directory {path}: {exc.strerror}") from None
        run = cls(path)
        run._created = not existed
        run.lock()
        return run

    def lock(self) -> None:
        """Hold an exclusive lock on the run for this process's lifetime (released at exit, even on
        kill -9): a second `fpt train --resume` of the same run is refused instead of interleaving
        its metrics with ours. Temporary files left by a killed writer are removed under the lock."""
        if self._lock is not None or fcntl is None:
            return
        try:
            handle = open(self.path / self.LOCK, "a+")
        except OSError as exc:
            raise FptError(f"cannot lock run directory {self.path}: {exc.strerror}; is it writable?") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise FptError(
                f"run directory {self.path} is in use by another fpt process; wait for it to "
                "finish (or stop it) and try again"
            ) from None
        self._lock = handle
        remove_stale_temporaries(self.path)

    def unlock(self) -> None:
        """Give back the lock `lock` took (a no-op when this process holds none)."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def remove(self) -> None:
        """Delete a run that failed before saving anything worth keeping (nothing half-made); a
        folder the user made beforehand is emptied, not deleted."""
        self.unlock()
        if self._created:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        for child in self.path.iterdir():
            shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)

    @classmethod
    def existing(cls, path: str | Path) -> "RunDir":
        """A run directory made earlier, refused in one line if it is missing or holds no config.json."""
        path = Path(path)
        if not path.is_dir():
            raise FptError(f"run directory {path} does not exist; pass the folder a previous `fpt train` printed")
        if not (path / cls.CONFIG).is_file():
            raise FptError(f"{path} holds no {cls.CONFIG}; it is not an fpt run directory")
        return cls(path)

    # --- files ------------------------------------------------------------------------------

    @property
    def config_path(self) -> Path:
        """config.json: the run's TrainConfig, every default filled in."""
        return self.path / self.CONFIG

    @property
    def checkpoint_path(self) -> Path:
        """checkpoint.safetensors: the trained tensors and optimizer state of the last checkpoint."""
        return self.path / self.CHECKPOINT

    @property
    def summary_path(self) -> Path:
        """summary.json: written when the run finishes; its presence marks the run finished."""
        return self.path / self.SUMMARY

    @property
    def has_checkpoint(self) -> bool:
        """True once the run has saved a checkpoint (so it can be resumed)."""
        return self.checkpoint_path.is_file()

    @property
    def is_finished(self) -> bool:
        """True once training finished (summary.json written)."""
        return self.summary_path.is_file()

    @property
    def _fixes(self) -> dict[str, str]:
        """What read_json_object says of a run's missing or damaged file."""
        return {"missing": f"is {self.path} an fpt run directory?", "damaged": "the run directory is damaged"}

    def read_config(self) -> dict:
        """The run's config.json as a dict; a missing or damaged file is one line."""
        return read_json_object(self.config_path, **self._fixes)

    def write_config(self, config: dict) -> None:
        """Write config.json atomically."""
        write_json(self.config_path, config)

    def read_summary(self) -> dict | None:
        """What `train` recorded when the run finished (None before); its figures checked, so a
        damaged file is one line here rather than a failure wherever a figure is read."""
        if not self.is_finished:
            return None
        summary = read_json_object(self.summary_path, **self._fixes)
        fix = f"delete it and run `fpt train --resume {self.path}`, which writes it again"
        for key, kinds in _SUMMARY_FIELDS.items():
            self._check(summary.get(key), kinds, f"{self.summary_path}: {key}", fix)
        if summary.get("final") is not None:
            self._check_result(summary["final"], f"{self.summary_path}: final", fix)
        return summary

    def write_summary(self, summary: dict) -> None:
        """Write summary.json atomically, which marks the run finished."""
        write_json(self.summary_path, summary)

    def check_not_in_use(self) -> None:
        """Refuse, in one line, a run another fpt process holds (still training, or resumed): what
        this process would read of it is about to change. Takes the lock and gives it back."""
        held = self._lock is not None
        self.lock()
        if not held:
            self.unlock()

    def write_evaluation(self, evaluation: dict) -> Path:
        """`fpt evaluate`'s results, written under the run's lock: refused while another process
        holds the run (its checkpoint moves on), or when the run has since finished past the step
        evaluated (summary.json's step), so that no evaluation older than the summary is kept."""
        held = self._lock is not None
        self.lock()
        try:
            summary, step = self.read_summary(), evaluation.get("step")
            if summary is not None and isinstance(step, int) and step < summary["step"]:
                raise FptError(
                    f"{self.path} finished at step {summary['step']} after this evaluated step {step}; "
                    f"run `fpt evaluate {self.path}` again"
                )
            return write_json(self.path / self.EVALUATION, evaluation)
        finally:
            if not held:
                self.unlock()

    def artifacts(self) -> list[Path]:
        """The files a tracker keeps with the run (fpt.tracking): summary, figures, report."""
        return [
            p for p in (self.summary_path, *sorted(self.path.glob("*.png")), self.path / "report.html") if p.is_file()
        ]

    def read_evaluation(self) -> dict | None:
        """`fpt evaluate`'s results ({"step", "splits": {name: result}}), or None before it ran."""
        if not (self.path / self.EVALUATION).is_file():
            return None
        evaluation = read_json_object(self.path / self.EVALUATION, **self._fixes)
        where, fix = self.path / self.EVALUATION, f"run `fpt evaluate {self.path}` again"
        # a file from before fpt evaluate kept one result per split has none: it is read as no results
        self._check(evaluation.get("splits"), (dict, type(None)), f"{where}: splits", fix)
        for name, result in (evaluation.get("splits") or {}).items():
            self._check_result(result, f"{where}: splits: {name}", fix)
        return evaluation

    @staticmethod
    def _check(value, kinds: tuple[type, ...], what: str, fix: str) -> None:
        try:
            check_type(value, kinds, what)
        except FptError as exc:
            raise FptError(f"{exc}; {fix}") from None

    @classmethod
    def _check_result(cls, result, where: str, fix: str) -> None:
        """One split's scores as `evaluate` returns them."""
        cls._check(result, (dict,), where, fix)
        fields = _RESULT_FIELDS
        if is_regression(result):  # a regression task's: mse and mae in place of accuracy
            fields = {
                **{k: v for k, v in fields.items() if k != "accuracy"},
                **{metric: (int, float) for metric in REGRESSION_METRICS},
            }
        for key, kinds in fields.items():
            cls._check(result.get(key), kinds, f"{where}: {key}", fix)

    # --- metrics ----------------------------------------------------------------------------

    def append_metrics(self, record: dict) -> None:
        """Append one evaluation record to metrics.jsonl (NaN refused: it is not JSON)."""
        with open(self.path / self.METRICS, "a") as handle:
            handle.write(json.dumps(record, allow_nan=False) + "\n")  # bare NaN is not JSON

    def read_metrics(self) -> list[dict]:
        """Every evaluation record; a torn last line (a run killed while appending) is dropped."""
        path = self.path / self.METRICS
        if not path.exists():
            return []
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
        records = []
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if number == len(lines):
                    break
                raise FptError(f"{path}, line {number}: not a JSON record; the run directory is damaged") from None
            score = (
                "mse" if isinstance(record, dict) and "accuracy" not in record else "accuracy"
            )  # mse: a regression task's
            if not (
                isinstance(record, dict)
                and isinstance(record.get("step"), int)
                and isinstance(record.get(score), (int, float))
            ):
                raise FptError(
                    f"{path}, line {number}: not an evaluation record (step, accuracy or mse); "
                    "the run directory is damaged"
                )
            records.append(record)
        return records

    def truncate_metrics(self, last_step: int) -> list[dict]:
        """On resume, drop evaluations made after the checkpoint (they will be made again); returns those kept."""
        kept = [r for r in self.read_metrics() if r["step"] <= last_step]
        write_text(self.path / self.METRICS, "".join(json.dumps(r, allow_nan=False) + "\n" for r in kept))
        return kept

    # --- failures (sweep cells) -------------------------------------------------------------

    @property
    def failure_path(self) -> Path:
        """failure.json: why a sweep cell did not finish, {"kind": ..., "message": ...} (fpt.core.errors kinds)."""
        return self.path / self.FAILURE

    def read_failure(self) -> dict | None:
        """The failure record of a failed cell, or None for a run that did not fail."""
        return read_json_object(self.failure_path, **self._fixes) if self.failure_path.is_file() else None
