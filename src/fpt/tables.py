"""Tables and curves of a sweep, with the paper's figures beside ours.

Each cell shows our mean and spread over seeds next to the paper's number. A cell whose runs
failed because the data is not on this machine says so; nothing is left blank or invented.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

TASK_COLUMNS = {  # task name -> the paper's column heading
    "bit-memory": "Bit Memory", "bit-xor": "XOR", "listops": "ListOps", "mnist": "MNIST",
    "fashion-mnist": "Fashion-MNIST", "cifar10": "CIFAR-10", "cifar10-lra": "C10 LRA", "remote-homology": "Homology",
}
_ORDER = list(TASK_COLUMNS)


_PAPER_ORDER = [t for t in _ORDER if t != "fashion-mnist"]  # the paper has no Fashion-MNIST column


def _row(*values):
    return dict(zip(_PAPER_ORDER, values))


# Test accuracy in percent, from PAPER.md (Lu et al. 2021).
PAPER = {
    "table1": {"fpt": _row(100, 100, 38.4, 98.0, 72.1, 38.6, 12.7), "full": _row(100, 100, 38, 99.1, 70.3, 42, 9),
               "lstm": _row(60.9, 50.1, 17.1, 99.5, 73.6, 11.7, 12)},
    "table2": {"fpt": _row(100, 100, 38.4, 98.0, 68.2, 38.6, 12.7), "random": _row(75.8, 100, 34.3, 91.7, 61.7, 36.1, 9.3),
               "bit": _row(100, 100, 35.4, 97.8, 62.6, 36.7, 7.8), "vit": _row(100, 100, 37.4, 97.8, 72.5, 43.0, 7.5)},
    "table3": {"random": _row(75.8, 100, 34.3, 91.7, 61.7, 36.1, 9.3), "lstm-frozen": _row(50.9, 50.0, 16.8, 70.9, 34.4, 10.4, 6.6),
               "lstm*-frozen": _row(75.0, 50.0, 16.7, 92.5, 43.5, 10.6, 8.6)},
    "stats-init": {"fpt": _row(100, 100, 38.4, 98.0, 68.2, 38.6, 12.7), "stats": _row(100, 100, 37.4, 97.2, 56.5, 33.1, 11.0),
                   "random": _row(75.8, 100, 34.3, 91.7, 61.7, 36.1, 9.3)},
    "table18": {"output-only": _row(76, 56, 15, 23, 25, 17, 2), "output+input": _row(98, 72, 17, 85, 53, 22, 8),
                "output+position": _row(93, 84, 35, 93, 38, 30, 8), "output+layernorm": _row(94, 98, 36, 96, 54, 39, 9)},
    "table20": {"random-output-only": _row(75, 50, 17, 25, 20, 11, 2), "random-output+input": _row(75, 51, 17, 28, 24, 16, 2),
                "random-output+position": _row(75, 59, 18, 34, 21, 12, 6),
                "random-output+layernorm": _row(75, 100, 35, 83, 46, 34, 9)},
}

PAPER["finetune-more"] = {"fpt": {"cifar10": 68.2}, "fpt+feedforward": {"cifar10": 76.6},
                          "fpt+last-attention": {"cifar10": 80.0}}
# Table 6: gradient steps to convergence, same batch size and learning rate.
PAPER_STEPS = {"fpt": _row(1e4, 5e2, 2e3, 5e3, 4e5, 3e5, 1e5), "random": _row(4e4, 2e4, 6e3, 2e4, 4e5, 6e5, 1e5)}
# Held-out accuracy that counts as converged for our Table 6 (the paper does not state its own).
THRESHOLDS = {"bit-memory": 0.95, "bit-xor": 0.95, "listops": 0.35, "mnist": 0.95, "fashion-mnist": 0.85,
              "cifar10": 0.65, "cifar10-lra": 0.35, "remote-homology": 0.10}

MISSING_DATA_HINTS = ("no mnist data", "no fashion-mnist data", "no cifar10 data", "no remote homology data",
                      "fpt data get", "is not on this machine")
# A failed run's error -> what its table cell says instead of a number.
SKIPPED = "skipped for time (--skip-variants)"
FAILURE_TEXTS = ((MISSING_DATA_HINTS, "data or weights not on this machine"),
                 (("no Bit Memory-trained",), "no Bit backbone yet (fpt export-backbone)"),
                 ((SKIPPED,), "not run here: skipped for time"))


def _failure_text(errors: list[str]) -> str:
    for hints, text in FAILURE_TEXTS:
        if any(hint in error for error in errors for hint in hints):
            return text
    return "failed"


def summarise(rows: list[dict], row_key: str = "variant") -> dict[tuple[str, str], dict]:
    """(row value, task) -> accuracies over seeds, and the errors of failed runs."""
    cells: dict[tuple[str, str], dict] = defaultdict(lambda: {"accuracy": [], "errors": []})
    for r in rows:
        key = (str(r.get(row_key, "fpt")), str(r["task"]))
        if r["status"] == "done" and r.get("accuracy") not in (None, ""):
            cells[key]["accuracy"].append(100 * float(r["accuracy"]))
        elif r.get("error"):
            cells[key]["errors"].append(r["error"])
    return cells


def _cell_text(cell: dict | None, paper: float | None) -> str:
    paper_text = f" (paper {paper:g})" if paper is not None else ""
    if cell is None:
        return "not run" + paper_text
    values = cell["accuracy"]
    if values:
        spread = f" ± {statistics.stdev(values):.1f}" if len(values) > 1 else ""
        return f"{statistics.mean(values):.1f}{spread} (n={len(values)}){paper_text}"
    return _failure_text(cell["errors"]) + paper_text


def markdown_table(rows: list[dict], title: str, paper_table: str | None = None, row_key: str = "variant") -> str:
    """Our mean ± std over seeds (n runs) beside the paper's figure, in percent."""
    cells = summarise(rows, row_key)
    paper = PAPER.get(paper_table or "", {})
    tasks = [t for t in _ORDER if any(r["task"] == t for r in rows)]
    tasks += sorted({str(r["task"]) for r in rows} - set(tasks))
    variants = list(dict.fromkeys(str(r.get(row_key, "fpt")) for r in rows))
    lines = [f"### {title}", "", "| | " + " | ".join(TASK_COLUMNS.get(t, t) for t in tasks) + " |",
             "|---" * (len(tasks) + 1) + "|"]
    for variant in variants:
        texts = [_cell_text(cells.get((variant, t)), paper.get(variant, {}).get(t)) for t in tasks]
        lines.append(f"| {variant} | " + " | ".join(texts) + " |")
    return "\n".join(lines) + "\n"


def first_step_reaching(run_dir: Path, threshold: float) -> int | None:
    """The first evaluated step whose held-out accuracy is at least `threshold` (None: never)."""
    metrics = Path(run_dir) / "metrics.jsonl"
    if not metrics.is_file():
        return None
    for line in metrics.read_text().splitlines():
        record = json.loads(line) if line.strip() else None
        if record and record["accuracy"] >= threshold:
            return int(record["step"])
    return None


def steps_table(rows: list[dict], title: str, row_key: str = "variant",
                thresholds: dict[str, float] | None = None) -> str:
    """Table 6: the median step at which each variant first reaches the task's threshold, how many
    seeds got there within the budget, and the speedup of fpt over random."""
    thresholds = {**THRESHOLDS, **(thresholds or {})}
    tasks = [t for t in _ORDER if any(r["task"] == t for r in rows)]
    tasks += sorted({str(r["task"]) for r in rows} - set(tasks))
    variants = list(dict.fromkeys(str(r.get(row_key, "fpt")) for r in rows))
    medians: dict[tuple[str, str], float] = {}
    never: dict[tuple[str, str], int] = {}  # (variant, task) -> the budget within which no seed got there
    lines = [f"### {title}", "", "thresholds: " + ", ".join(f"{t} {100 * thresholds.get(t, 0.9):g}%" for t in tasks), "",
             "| | " + " | ".join(TASK_COLUMNS.get(t, t) for t in tasks) + " |", "|---" * (len(tasks) + 1) + "|"]
    for variant in variants:
        texts = []
        for task in tasks:
            runs = [r for r in rows if str(r.get(row_key, "fpt")) == variant and r["task"] == task]
            done = [r for r in runs if r["status"] == "done"]
            paper = PAPER_STEPS.get(variant, {}).get(task)
            paper_text = f" (paper {paper:.0e})" if paper is not None else ""
            if not done:
                errors = [r.get("error") or "" for r in runs]
                texts.append((_failure_text(errors) if runs else "not run") + paper_text)
                continue
            reached = [s for s in (first_step_reaching(r["run_dir"], thresholds.get(task, 0.9)) for r in done) if s is not None]
            budget = max(int(r.get("step") or 0) for r in done)
            if reached:
                medians[(variant, task)] = statistics.median(reached)
                texts.append(f"{statistics.median(reached):g} ({len(reached)}/{len(done)} reached){paper_text}")
            else:
                never[(variant, task)] = budget
                texts.append(f"> {budget} (0/{len(done)} reached){paper_text}")
        lines.append(f"| {variant} | " + " | ".join(texts) + " |")
    if "fpt" in variants and "random" in variants:
        speedups = []
        for task in tasks:
            fpt, random = medians.get(("fpt", task)), medians.get(("random", task))
            if fpt and random:
                speedups.append(f"{random / fpt:.1f}x")
            elif fpt and ("random", task) in never:  # random did not get there within its budget
                speedups.append(f"> {never[('random', task)] / fpt:.1f}x (random did not reach it)")
            else:
                speedups.append("n/a (fpt did not reach it)" if ("fpt", task) in never else "n/a")
        lines.append("| speedup random/fpt | " + " | ".join(speedups) + " |")
    return "\n".join(lines) + "\n"


def learning_curves(rows: list[dict], path: Path, row_key: str = "variant") -> Path | None:
    """One panel per task: held-out accuracy against step, one line per variant and seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if r["status"] == "done" and (Path(r.get("run_dir", "")) / "metrics.jsonl").is_file()]
    tasks = list(dict.fromkeys(str(r["task"]) for r in done))
    if not tasks:
        return None
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.4), dpi=110, squeeze=False)
    colours = {}
    for ax, task in zip(axes[0], tasks):
        for r in (r for r in done if r["task"] == task):
            metrics = Path(r["run_dir"]) / "metrics.jsonl"
            points = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
            variant = str(r.get(row_key, "fpt"))
            colour = colours.setdefault(variant, f"C{len(colours) % 10}")
            ax.plot([p["step"] for p in points], [100 * p["accuracy"] for p in points], color=colour, alpha=0.8,
                    label=variant if variant not in ax.get_legend_handles_labels()[1] else None)
        ax.set_title(TASK_COLUMNS.get(task, task))
        ax.set_xlabel("step")
        ax.set_ylabel("held-out accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)
    return path
