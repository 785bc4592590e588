"""Sweeps: a grid of runs from a YAML spec, several at a time, resumable, summarised in tables.

    name: modality                # optional
    grid:                         # every combination is one run (a "cell")
      task: [bit-xor, bit-memory]
      variant: [fpt, random]
      seed: [0, 1, 2]
    options:                      # the same for every cell: any `fpt train` option
      steps: 500
    parallel: 2                   # cells at once (threads are split between them)

Each cell is a separate `fpt train` process writing its own run directory under
SWEEP_DIR/runs/. A cell whose summary.json exists is never run again; one that was killed is
resumed from its checkpoint. A cell that fails is recorded with its error and the sweep goes on.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fpt.errors import FptError

# A variant is a named bundle of options (appendix D of the paper).
VARIANTS: dict[str, dict] = {
    "fpt": {"policy": "fpt", "init": "pretrained"},
    "full": {"policy": "full", "init": "pretrained"},
    "random": {"policy": "fpt", "init": "random"},
    "stats": {"policy": "fpt", "init": "stats"},
    "bit": {"policy": "fpt", "init": "bit"},  # needs `fpt export-backbone` of a Bit Memory run first
    "vit": {"policy": "fpt", "init": "pretrained", "backbone": "vit-base"},
    "lstm": {"model": "lstm"},
    "lstm*": {"model": "lstm*"},
    "lstm-frozen": {"model": "lstm-frozen"},
    "lstm*-frozen": {"model": "lstm*-frozen"},
    "cnn": {"model": "cnn"},
    "cnn-matched": {"model": "cnn-matched"},
    "output-only": {"policy": "output-only"},
    "output+input": {"policy": "output+input"},
    "output+position": {"policy": "output+position"},
    "output+layernorm": {"policy": "output+layernorm"},
    "random-output-only": {"policy": "output-only", "init": "random"},
    "random-output+input": {"policy": "output+input", "init": "random"},
    "random-output+position": {"policy": "output+position", "init": "random"},
    "random-output+layernorm": {"policy": "output+layernorm", "init": "random"},
    "fpt+feedforward": {"policy": "fpt+feedforward"},
    "fpt+last-attention": {"policy": "fpt+last-attention"},
}
SPEC_KEYS = {"name", "grid", "options", "parallel"}


def _option_names() -> set[str]:
    from fpt.cli import TASK_OPTIONS
    from fpt.train import TrainConfig

    return ({f.name for f in dataclasses.fields(TrainConfig)} - {"task_options"}) | set(TASK_OPTIONS) | {"variant"}


@dataclass
class Cell:
    """One run of the grid: its values and its directory name."""

    values: dict

    @property
    def name(self) -> str:
        text = ",".join(f"{k}={v}" for k, v in self.values.items())
        return re.sub(r"[^A-Za-z0-9=,._+*-]", "_", text)


@dataclass
class SweepSpec:
    name: str
    grid: dict[str, list]
    options: dict
    parallel: int = 1

    def cells(self) -> list[Cell]:
        keys = list(self.grid)
        return [Cell(dict(zip(keys, values))) for values in itertools.product(*(self.grid[k] for k in keys))]


def _line_of(node, key: str) -> int:
    """1-based line of `key` in a YAML mapping node, for error messages."""
    for key_node, _ in getattr(node, "value", []):
        if getattr(key_node, "value", None) == key:
            return key_node.start_mark.line + 1
    return node.start_mark.line + 1


def _check_value(key: str, value, where: str) -> None:
    from fpt.tasks import list_tasks

    if key == "variant" and value not in VARIANTS:
        raise FptError(f"{where}: unknown variant {value!r}; choose from {', '.join(VARIANTS)}")
    if key == "task" and not (str(value).startswith("npz:") or value in list_tasks()):
        raise FptError(f"{where}: unknown task {value!r}; choose from {', '.join(list_tasks())}")


def load_spec(path: Path) -> SweepSpec:
    """Read and check a sweep spec: an unknown key, task or variant is refused, naming its line."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except FileNotFoundError:
        raise FptError(f"sweep spec {path} does not exist") from None
    except yaml.YAMLError as exc:
        raise FptError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise FptError(f"{path}: a sweep spec is a mapping with keys {', '.join(sorted(SPEC_KEYS))}")
    for key in data:
        if key not in SPEC_KEYS:
            raise FptError(f"{path}, line {_line_of(root, key)}: unknown key {key!r}; a spec has {', '.join(sorted(SPEC_KEYS))}")
    grid, options = data.get("grid") or {}, data.get("options") or {}
    if not isinstance(grid, dict) or not grid:
        raise FptError(f"{path}: 'grid' must map option names to lists of values")
    known = _option_names()
    grid_node = next(v for k, v in root.value if k.value == "grid")
    options_node = next((v for k, v in root.value if k.value == "options"), root)
    for section, mapping, node in (("grid", grid, grid_node), ("options", options, options_node)):
        for key, value in mapping.items():
            where = f"{path}, line {_line_of(node, key)}"
            if key not in known:
                raise FptError(f"{where}: unknown {section} key {key!r}; use `fpt train` option names with underscores")
            values = value if section == "grid" else [value]
            if section == "grid" and (not isinstance(value, list) or not value):
                raise FptError(f"{where}: grid values of {key!r} must be a non-empty list")
            for item in values:
                _check_value(key, item, where)
    parallel = data.get("parallel", 1)
    if not isinstance(parallel, int) or parallel < 1:
        raise FptError(f"{path}: 'parallel' must be a positive integer, got {parallel!r}")
    return SweepSpec(data.get("name") or path.stem, grid, options, parallel)


def _train_args(options: dict, values: dict, threads: int) -> list[str]:
    """The `fpt train` arguments of one cell: the spec's options (less those only transformers take,
    for a baseline cell), overridden by the variant's bundle (so `vit` wins over a spec-wide
    backbone), overridden by the cell's own grid values."""
    from fpt.train import TRANSFORMER_ONLY_OPTIONS

    # a table of FPT and LSTM rows run with `precision: bf16` gives it to the transformer cells only
    variant = VARIANTS[values["variant"]] if "variant" in values else {}
    baseline = values.get("model", variant.get("model", options.get("model", "fpt"))) != "fpt"
    merged = {k: v for k, v in options.items() if not (baseline and k in TRANSFORMER_ONLY_OPTIONS)}
    merged.update(variant)
    merged.update({k: v for k, v in values.items() if k != "variant"})
    args = ["--threads", str(threads), "--no-progress"]
    for key, value in merged.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else "--no-" + flag[2:])
        elif value is not None:
            args += [flag, str(value)]
    return args


def _cell_status(run_dir: Path) -> str:
    if (run_dir / "summary.json").is_file():
        return "done"
    if (run_dir / "checkpoint.safetensors").is_file():
        return "resumable"
    return "new"


def run_cell(cell: Cell, spec: SweepSpec, sweep_dir: Path, threads: int) -> dict:
    """Run (or resume) one cell in its own process; never raises: a failure is a result."""
    run_dir = sweep_dir / "runs" / cell.name
    log = sweep_dir / "logs" / f"{cell.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    status = _cell_status(run_dir)
    if status != "done":
        if status == "resumable":
            command = ["train", "--resume", str(run_dir), "--threads", str(threads), "--no-progress"]
        else:
            shutil.rmtree(run_dir, ignore_errors=True)  # a cell killed before its first checkpoint
            command = ["train", *_train_args(spec.options, cell.values, threads), "--out", str(run_dir)]
        with open(log, "a") as handle:
            proc = subprocess.run([sys.executable, "-m", "fpt.cli", *command], stdout=handle,
                                  stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            handle.write(proc.stderr)
        if proc.returncode != 0:
            error = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            return {**cell.values, "status": "failed", "error": error, "run_dir": str(run_dir)}
    summary = json.loads((run_dir / "summary.json").read_text())
    final = summary.get("final") or {}
    return {**cell.values, "status": "done", "split": final.get("split"), "accuracy": final.get("accuracy"),
            "step": summary.get("step"), "reached_at": summary.get("target_reached_at_step"),
            "wall_time_s": summary.get("wall_time_s"), "run_dir": str(run_dir), "error": ""}


def run_sweep(spec: SweepSpec, sweep_dir: Path, progress: bool = True) -> list[dict]:
    """Run every cell not yet done, `spec.parallel` at a time; write results.csv; return the rows."""
    from tqdm.auto import tqdm

    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / "spec.json").write_text(json.dumps(dataclasses.asdict(spec), indent=2) + "\n")
    cells = spec.cells()
    threads = max(1, (os.cpu_count() or 1) // spec.parallel)
    with ThreadPoolExecutor(spec.parallel) as pool, tqdm(total=len(cells), disable=not progress, unit="run",
                                                         desc=f"sweep {spec.name}") as bar:
        futures = [pool.submit(run_cell, cell, spec, sweep_dir, threads) for cell in cells]
        rows = []
        for cell, future in zip(cells, futures):
            # "row": what tells this cell's table row apart (every grid value but task and seed)
            label = ",".join(f"{k}={v}" for k, v in cell.values.items() if k not in ("task", "seed")) or "fpt"
            rows.append({**future.result(), "row": label})
            bar.update(1)
    write_results_csv(rows, sweep_dir / "results.csv")
    return rows


def write_results_csv(rows: list[dict], path: Path) -> None:
    columns = list(dict.fromkeys(k for row in rows for k in row))
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


ALL_TASKS = ["bit-memory", "bit-xor", "listops", "mnist", "fashion-mnist", "cifar10", "cifar10-lra", "remote-homology"]
IMAGE_TASKS = ["mnist", "fashion-mnist", "cifar10"]
# name -> (grid, the paper table it sits beside, the grid key that names a table row)
REPRODUCIBLE: dict[str, tuple[dict, str | None, str]] = {
    "table1": ({"task": ALL_TASKS, "variant": ["fpt", "full", "lstm"]}, "table1", "variant"),
    "table2": ({"task": ALL_TASKS, "variant": ["fpt", "random", "bit", "vit"]}, "table2", "variant"),
    "table3": ({"task": ALL_TASKS, "variant": ["random", "lstm-frozen", "lstm*-frozen"]}, "table3", "variant"),
    "table6": ({"task": ALL_TASKS, "variant": ["fpt", "random"]}, "table6", "variant"),
    "stats-init": ({"task": ALL_TASKS, "variant": ["fpt", "stats", "random"]}, "stats-init", "variant"),
    "table18": ({"task": ALL_TASKS, "variant": ["output-only", "output+input", "output+position",
                                                "output+layernorm"]}, "table18", "variant"),
    "table20": ({"task": ALL_TASKS, "variant": ["random-output-only", "random-output+input",
                                                "random-output+position", "random-output+layernorm"]},
                "table20", "variant"),
    "table12": ({"task": ["listops"], "variant": ["output-only"], "layers": [1, 3, 6]}, None, "layers"),
    "finetune-more": ({"task": ["cifar10"], "variant": ["fpt", "fpt+feedforward", "fpt+last-attention"]},
                      "finetune-more", "variant"),
    "cnn": ({"task": IMAGE_TASKS, "variant": ["fpt", "cnn", "cnn-matched"]}, None, "variant"),
}


def reproduce_spec(name: str, budget: int, backbone: str, seeds: int, parallel: int = 1,
                   tasks: list[str] | None = None) -> tuple[SweepSpec, str | None, str]:
    """The ready-made sweep `name`, optionally restricted to some of its tasks."""
    if name not in REPRODUCIBLE:
        raise FptError(f"unknown table {name!r}; choose from {', '.join(REPRODUCIBLE)}")
    if budget < 1 or seeds < 1:
        raise FptError("--budget and --seeds must be at least 1")
    grid, paper_table, row_key = REPRODUCIBLE[name]
    grid = dict(grid)
    if tasks:
        unknown = [t for t in tasks if t not in grid["task"]]
        if unknown:
            raise FptError(f"{name} has no task {', '.join(unknown)}; its tasks are {', '.join(grid['task'])}")
        grid["task"] = [t for t in grid["task"] if t in tasks]
    options = {"steps": budget, "backbone": backbone}
    if name == "table6":  # the step a threshold is first reached is read from the evaluations
        options["eval_every"] = max(1, budget // 20)
    spec = SweepSpec(name, {**grid, "seed": list(range(seeds))}, options, parallel)
    return spec, paper_table, row_key


def write_reports(rows: list[dict], spec: SweepSpec, sweep_dir: Path, paper_table: str | None,
                  row_key: str = "variant") -> Path:
    """results.md (our numbers beside the paper's) and curves.png."""
    from fpt.tables import learning_curves, markdown_table, steps_table

    options = ", ".join(f"{k}={v}" for k, v in spec.options.items())
    seeds = len(spec.grid.get("seed", [0]))
    if paper_table == "table6":
        title = f"{spec.name}: {options}; {seeds} seed(s); steps to reach the held-out threshold, paper in parentheses"
        text = steps_table(rows, title, row_key)
    else:
        title = f"{spec.name}: {options}; {seeds} seed(s); test accuracy in %, paper in parentheses"
        text = markdown_table(rows, title, paper_table, row_key)
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        text += "\nFailed runs:\n" + "".join(f"- {Path(r['run_dir']).name}: {r['error']}\n" for r in failed)
    path = sweep_dir / "results.md"
    path.write_text(text)
    learning_curves(rows, sweep_dir / "curves.png", row_key)
    return path
