"""The run directory: config.json, metrics.jsonl, summary.json and the checkpoint, side by side.

Files are written atomically (temp file + rename) so a killed run never leaves half a file.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from fpt.errors import FptError


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FptError(f"{path} is missing; is {path.parent} an fpt run directory?") from None
    except json.JSONDecodeError as exc:
        raise FptError(f"{path} is not valid JSON ({exc}); the run directory is damaged") from None


def default_run_dir(task: str, backbone: str, root: Path = Path("runs")) -> Path:
    """runs/<task>-<backbone>-<time>: backbone paths are reduced to their last component."""
    label = Path(backbone.rstrip("/")).name.replace("/", "_")
    return root / f"{task.replace(':', '_').replace('/', '_')}-{label}-{time.strftime('%Y%m%d-%H%M%S')}"


def create_run_dir(path: Path) -> Path:
    if path.exists() and any(path.iterdir()):
        raise FptError(f"run directory {path} already exists and is not empty; pick another --out or --resume it")
    path.mkdir(parents=True, exist_ok=True)
    return path


def existing_run_dir(path: Path) -> Path:
    if not path.is_dir():
        raise FptError(f"run directory {path} does not exist; pass the folder a previous `fpt train` printed")
    if not (path / "config.json").is_file():
        raise FptError(f"{path} holds no config.json; it is not an fpt run directory")
    return path


def append_metrics(run_dir: Path, record: dict) -> None:
    with open(run_dir / "metrics.jsonl", "a") as handle:
        handle.write(json.dumps(record) + "\n")


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def truncate_metrics(run_dir: Path, last_step: int) -> None:
    """On resume, drop evaluations made after the checkpoint: they will be made again."""
    kept = [r for r in read_metrics(run_dir) if r["step"] <= last_step]
    tmp = run_dir / "metrics.jsonl.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    os.replace(tmp, run_dir / "metrics.jsonl")
