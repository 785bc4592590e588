"""The run directory: every file of a run, its name and its reader, in one place (`RunDir`).

    config.json      the TrainConfig that rebuilds the run
    metrics.jsonl    one record per evaluation (the record of truth for curves and tables)
    summary.json     written once the run ends: final evaluation, steps, wall time
    checkpoint.safetensors   trained tensors, Adam moments, step, RNG (fpt.checkpoint)
    evaluation.json  `fpt evaluate`'s per-split results
    failure.json     why a sweep cell did not finish: {"kind": ..., "message": ...} (fpt.errors kinds)

Files are written atomically (fpt.paths.atomic_write), so a killed run never leaves half a file.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from fpt.errors import KINDS, FptError
from fpt.paths import write_json, write_text


class RunDir:
    CONFIG = "config.json"
    METRICS = "metrics.jsonl"
    SUMMARY = "summary.json"
    CHECKPOINT = "checkpoint.safetensors"
    EVALUATION = "evaluation.json"
    FAILURE = "failure.json"

    def __init__(self, path: str | Path):
        self.path = Path(path)

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
    def create(cls, path: str | Path) -> "RunDir":
        path = Path(path)
        if path.exists() and any(path.iterdir()):
            raise FptError(f"run directory {path} already exists and is not empty; pick another --out or --resume it")
        path.mkdir(parents=True, exist_ok=True)
        return cls(path)

    @classmethod
    def existing(cls, path: str | Path) -> "RunDir":
        path = Path(path)
        if not path.is_dir():
            raise FptError(f"run directory {path} does not exist; pass the folder a previous `fpt train` printed")
        if not (path / cls.CONFIG).is_file():
            raise FptError(f"{path} holds no {cls.CONFIG}; it is not an fpt run directory")
        return cls(path)

    # --- files ------------------------------------------------------------------------------

    @property
    def config_path(self) -> Path:
        return self.path / self.CONFIG

    @property
    def checkpoint_path(self) -> Path:
        return self.path / self.CHECKPOINT

    @property
    def summary_path(self) -> Path:
        return self.path / self.SUMMARY

    @property
    def has_checkpoint(self) -> bool:
        return self.checkpoint_path.is_file()

    @property
    def is_finished(self) -> bool:
        return self.summary_path.is_file()

    def _read_json(self, name: str) -> dict:
        path = self.path / name
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise FptError(f"{path} is missing; is {self.path} an fpt run directory?") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise FptError(f"{path} is not valid JSON ({exc}); the run directory is damaged") from None
        if not isinstance(data, dict):
            raise FptError(f"{path} holds a {type(data).__name__}, not a JSON object; the run directory is damaged")
        return data

    def read_config(self) -> dict:
        return self._read_json(self.CONFIG)

    def write_config(self, config: dict) -> None:
        write_json(self.config_path, config)

    def read_summary(self) -> dict | None:
        return self._read_json(self.SUMMARY) if self.is_finished else None

    def write_summary(self, summary: dict) -> None:
        write_json(self.summary_path, summary)

    def write_evaluation(self, evaluation: dict) -> Path:
        return write_json(self.path / self.EVALUATION, evaluation)

    def final_accuracy(self) -> float | None:
        summary = self.read_summary() or {}
        return (summary.get("final") or {}).get("accuracy")

    # --- metrics ----------------------------------------------------------------------------

    def append_metrics(self, record: dict) -> None:
        with open(self.path / self.METRICS, "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def read_metrics(self) -> list[dict]:
        path = self.path / self.METRICS
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def truncate_metrics(self, last_step: int) -> None:
        """On resume, drop evaluations made after the checkpoint: they will be made again."""
        kept = [r for r in self.read_metrics() if r["step"] <= last_step]
        write_text(self.path / self.METRICS, "".join(json.dumps(r) + "\n" for r in kept))

    # --- failures (sweep cells) -------------------------------------------------------------

    @property
    def failure_path(self) -> Path:
        return self.path / self.FAILURE

    def write_failure(self, kind: str, message: str) -> None:
        write_json(self.failure_path, {"kind": kind if kind in KINDS else "usage", "message": message})

    def read_failure(self) -> dict | None:
        return self._read_json(self.FAILURE) if self.failure_path.is_file() else None
