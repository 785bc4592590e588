"""Tables of a sweep as Markdown text, with the paper's figures beside ours (figures: plots.py).

Each cell shows our mean and spread over seeds next to the paper's number. A cell whose runs
failed because the data is not on this machine says so (from the run's failure kind); nothing
is left blank or invented.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from fpt.errors import MISSING_BACKBONE, MISSING_BIT_BACKBONE, MISSING_DATA, SKIPPED
from fpt.experiments.paper import PAPER, PAPER_STEPS, TASK_COLUMNS, TASK_ORDER, THRESHOLDS
from fpt.runs import RunDir

# A failed run's failure kind (failure.json, fpt.errors) -> what its table cell says instead of a number.
FAILURE_TEXTS = {
    MISSING_DATA: "data or weights not on this machine",
    MISSING_BACKBONE: "data or weights not on this machine",
    MISSING_BIT_BACKBONE: "no Bit backbone yet (fpt export-backbone)",
    SKIPPED: "not run here: skipped for time",
}


def _failure_text(kinds: list[str]) -> str:
    for kind in kinds:
        if kind in FAILURE_TEXTS:
            return FAILURE_TEXTS[kind]
    return "failed"


def summarise(rows: list[dict], row_key: str = "variant") -> dict[tuple[str, str], dict]:
    """(row value, task) -> accuracies over seeds, and the failure kinds of runs that did not finish."""
    cells: dict[tuple[str, str], dict] = defaultdict(lambda: {"accuracy": [], "failures": []})
    for r in rows:
        key = (str(r.get(row_key, "fpt")), str(r["task"]))
        if r["status"] == "done" and r.get("accuracy") not in (None, ""):
            cells[key]["accuracy"].append(100 * float(r["accuracy"]))
        elif r["status"] in ("failed", "skipped"):
            cells[key]["failures"].append(r.get("failure") or "")
    return cells


def _cell_text(cell: dict | None, paper: float | None) -> str:
    paper_text = f" (paper {paper:g})" if paper is not None else ""
    if cell is None:
        return "not run" + paper_text
    values = cell["accuracy"]
    if values:
        spread = f" ± {statistics.stdev(values):.1f}" if len(values) > 1 else ""
        return f"{statistics.mean(values):.1f}{spread} (n={len(values)}){paper_text}"
    return _failure_text(cell["failures"]) + paper_text


def markdown_table(rows: list[dict], title: str, paper_table: str | None = None, row_key: str = "variant") -> str:
    """Our mean ± std over seeds (n runs) beside the paper's figure, in percent."""
    cells = summarise(rows, row_key)
    paper = PAPER.get(paper_table or "", {})
    tasks = [t for t in TASK_ORDER if any(r["task"] == t for r in rows)]
    tasks += sorted({str(r["task"]) for r in rows} - set(tasks))
    variants = list(dict.fromkeys(str(r.get(row_key, "fpt")) for r in rows))
    lines = [f"### {title}", "", "| | " + " | ".join(TASK_COLUMNS.get(t, t) for t in tasks) + " |",
             "|---" * (len(tasks) + 1) + "|"]
    for variant in variants:
        texts = [_cell_text(cells.get((variant, t)), paper.get(variant, {}).get(t)) for t in tasks]
        lines.append(f"| {variant} | " + " | ".join(texts) + " |")
    return "\n".join(lines) + "\n"


def first_step_reaching(run_dir, threshold: float) -> int | None:
    """The first evaluated step whose held-out accuracy is at least `threshold` (None: never)."""
    for record in RunDir(run_dir).read_metrics():
        if record["accuracy"] >= threshold:
            return int(record["step"])
    return None


def steps_table(rows: list[dict], title: str, row_key: str = "variant",
                thresholds: dict[str, float] | None = None) -> str:
    """Table 6: the median step at which each variant first reaches the task's threshold, how many
    seeds got there within the budget, and the speedup of fpt over random."""
    thresholds = {**THRESHOLDS, **(thresholds or {})}
    tasks = [t for t in TASK_ORDER if any(r["task"] == t for r in rows)]
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
                failures = [r.get("failure") or "" for r in runs]
                texts.append((_failure_text(failures) if runs else "not run") + paper_text)
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
