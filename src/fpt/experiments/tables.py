"""Tables of a sweep as Markdown text, with the paper's figures beside ours (figures: plots.py).

Each cell shows our mean and spread over seeds next to the paper's number, on the split its
column names (a task's test split, or each of its test holdouts, scored once at the end of every
run; the generated bit tasks' test set is a second fixed draw; a task without one, its held-out set). A regression
task's cell (a forecast) shows MSE / MAE, lower being better, the lowest MSE of a column in bold. A cell
whose runs failed because the data is not on this machine says so (from the run's failure kind);
nothing is left blank or invented. `table_data` and `steps_data` are what the text and the charts share.
"""

from __future__ import annotations

import collections
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from fpt.core.errors import DIVERGED, MISSING_BACKBONE, MISSING_BIT_BACKBONE, MISSING_DATA, SKIPPED, TOO_SHALLOW
from fpt.core.scores import is_regression
from fpt.experiments.convergence import Convergence, convergence, describe
from fpt.experiments.paper import PAPER, PAPER_SCORED_VALIDATION, PAPER_STEPS, TASK_COLUMNS, TASK_ORDER
from fpt.experiments.sweep import KNOWN_SPLITS, SCORE_PREFIX, STOPPED, split_order
from fpt.training.run_dir import RunDir, whole_split

# A failed run's failure kind (failure.json, fpt.core.errors) -> what its table cell says instead of a number.
FAILURE_TEXTS = {
    MISSING_DATA: "data or weights not on this machine",
    MISSING_BACKBONE: "data or weights not on this machine",
    MISSING_BIT_BACKBONE: "no Bit backbone yet (fpt export-backbone)",
    SKIPPED: "not run here: skipped for time",
    TOO_SHALLOW: "needs a deeper backbone",
    DIVERGED: "diverged (a lower --lr may train)",
}
# A split's name in a column heading, for each of the sweep's known splits in their order.
SPLIT_LABELS = dict(
    zip(
        KNOWN_SPLITS,
        ("held-out", "val", "val", "test", "test (fold)", "test (superfamily)", "test (family)"),
        strict=True,
    )
)


def failure_text(kinds: list[str], layers=None) -> str:
    """What a cell says instead of a number, from its failed runs' failure kinds: the first kind FAILURE_TEXTS
    knows ("needs a K-layer backbone" when the row's --layers is known), else "failed"."""
    for kind in kinds:
        if kind == TOO_SHALLOW and layers not in (None, ""):
            return f"needs a {layers}-layer backbone"
        if kind in FAILURE_TEXTS:
            return FAILURE_TEXTS[kind]
    return "failed"


def row_metric(row: dict) -> str:
    """What a row is ranked by: "mse" for a regression run's (lower is better), else "accuracy"."""
    return (
        "mse"
        if any((key == "mse" or key.startswith("mse:")) and value not in (None, "") for key, value in row.items())
        else "accuracy"
    )


def scores(row: dict, metric: str | None = None) -> dict[str | None, float]:
    """A finished run's score per reported split: its accuracy, or a regression run's MSE (`metric`
    "mae": its MAE). A row made before splits were named: its one score, on the split it names."""
    metric = metric or row_metric(row)
    prefix = SCORE_PREFIX if metric == "accuracy" else f"{metric}:"
    found = {
        key[len(prefix) :]: float(value)
        for key, value in row.items()
        if key.startswith(prefix) and value not in (None, "")
    }
    if not found and row.get(metric) not in (None, ""):
        found = {row.get("split") or None: float(row[metric])}
    return found


def column_heading(task: str, split: str | None) -> str:
    """A column's heading: the task's name as the paper's tables give it, and the split's label if it has one
    ("Homology, test (fold)")."""
    name = TASK_COLUMNS.get(task, task)
    return name if split is None else f"{name}, {SPLIT_LABELS.get(split, split)}"


def _tasks(rows: list[dict]) -> list[str]:
    tasks = [t for t in TASK_ORDER if any(r["task"] == t for r in rows)]
    return tasks + sorted({str(r["task"]) for r in rows} - set(tasks))


@dataclass
class TableData:
    """A table of accuracies: columns (task, split), rows (labels), our values in percent per cell
    (one per seed), failure kinds per (row, task), and the paper's figure per cell. A regression
    task's cells hold MSEs (not percent) and `mae` their MAEs; `metrics` names each task's metric."""

    columns: list[tuple[str, str | None]]
    rows: list[str]
    ours: dict[tuple[str, tuple], list[float]] = field(default_factory=dict)
    failures: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    layers: dict[str, object] = field(default_factory=dict)  # row -> its --layers, for "needs a K-layer backbone"
    paper: dict[tuple[str, tuple], float] = field(default_factory=dict)
    metrics: dict[str, str] = field(default_factory=dict)  # task -> "mse" for a regression task's columns
    mae: dict[tuple[str, tuple], list[float]] = field(default_factory=dict)

    def metric(self, column: tuple) -> str:
        """What a (task, split) column's cells hold: "mse" for a regression task's, else "accuracy"."""
        return self.metrics.get(column[0], "accuracy")


def table_data(rows: list[dict], paper_table: str | None = None, row_key: str = "variant") -> TableData:
    """Gather a sweep's results.csv rows into a TableData: one row per value of `row_key`, one column per task
    and reported split (known tasks in the paper's order), finished runs' scores per cell (accuracy in
    percent, or MSE and MAE), failed and skipped runs' failure kinds, and the figures of PAPER[`paper_table`]."""
    paper = PAPER.get(paper_table or "", {})
    ours: dict = defaultdict(list)
    maes: dict = defaultdict(list)
    failures: dict = defaultdict(list)
    layers, metrics = {}, {}
    for r in rows:
        label = str(r.get(row_key, "fpt"))
        layers.setdefault(label, r.get("layers"))
        if r["status"] == "done" and row_metric(r) == "mse":  # a regression run: MSE and MAE as they are
            metrics[str(r["task"])] = "mse"
            for split, mse in scores(r, "mse").items():
                ours[(label, (str(r["task"]), split))].append(mse)
            for split, mae in scores(r, "mae").items():
                maes[(label, (str(r["task"]), split))].append(mae)
        elif r["status"] == "done":
            for split, accuracy in scores(r).items():
                ours[(label, (str(r["task"]), split))].append(100 * accuracy)
        elif r["status"] in ("failed", "skipped"):
            failures[(label, str(r["task"]))].append(r.get("failure") or "")
    columns = []
    for task in _tasks(rows):
        splits = sorted({s for (_, (t, s)) in ours if t == task}, key=split_order)
        columns += [(task, s) for s in splits] or [(task, None)]
    labels = list(dict.fromkeys(str(r.get(row_key, "fpt")) for r in rows))
    figures = {
        (label, column): paper[label][column[0]]
        for label in labels
        for column in columns
        if column[0] in paper.get(label, {})
    }
    return TableData(columns, labels, dict(ours), dict(failures), layers, figures, metrics, dict(maes))


def _cell_text(data: TableData, label: str, column: tuple) -> str:
    paper = data.paper.get((label, column))
    paper_text = f" (paper {paper:g})" if paper is not None else ""
    values = data.ours.get((label, column))
    if values and data.metric(column) == "mse":
        spread = f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else ""
        maes = data.mae.get((label, column))
        mae = f" / {statistics.mean(maes):.3f}" if maes else ""
        text = f"{statistics.mean(values):.3f}{spread}{mae}"
        return f"{f'**{text}**' if label == _lowest(data, column) else text} (n={len(values)}){paper_text}"
    if values:
        spread = f" ± {statistics.stdev(values):.1f}" if len(values) > 1 else ""
        return f"{statistics.mean(values):.1f}{spread} (n={len(values)}){paper_text}"
    kinds = data.failures.get((label, column[0]))
    if kinds is None:
        return "not run" + paper_text
    return failure_text(kinds, data.layers.get(label)) + paper_text


def _lowest(data: TableData, column: tuple) -> str | None:
    """The row with a regression column's lowest mean MSE, where two rows or more have one."""
    means = {
        label: statistics.mean(data.ours[(label, column)]) for label in data.rows if data.ours.get((label, column))
    }
    return min(means, key=means.get) if len(means) > 1 else None


def markdown_table(rows: list[dict], title: str, paper_table: str | None = None, row_key: str = "variant") -> str:
    """Our mean ± std over seeds (n runs) beside the paper's figure, in percent, one column per
    task and reported split; a regression task's: MSE ± std / MAE, the lowest MSE in bold."""
    data = table_data(rows, paper_table, row_key)
    lines = [
        f"### {title}",
        "",
        "| | " + " | ".join(column_heading(*c) for c in data.columns) + " |",
        "|---" * (len(data.columns) + 1) + "|",
    ]
    for label in data.rows:
        lines.append(f"| {label} | " + " | ".join(_cell_text(data, label, c) for c in data.columns) + " |")
    validation = [
        TASK_COLUMNS[t] for t in PAPER_SCORED_VALIDATION if data.paper and any(c[0] == t for c in data.columns)
    ]
    if validation:
        lines += [
            "",
            f"The paper's figures for {' and '.join(validation)} are its code's validation-split scores; "
            "ours are the test split(s) named in each column.",
        ]
    return "\n".join(lines) + "\n"


def split_title(rows: list[dict]) -> str:
    """What a table's cells hold, for its title."""
    splits = {s for r in rows if r["status"] == "done" for s in scores(r)}
    tested = splits and all(s is not None and (s == "test" or s.startswith("test_")) for s in splits)
    done = [r for r in rows if r["status"] == "done"]
    if done and all(row_metric(r) == "mse" for r in done):
        return (
            "test MSE / MAE (lower is better)"
            if tested
            else "MSE / MAE (lower is better) on the split named in each column (test where the task has one)"
        )
    forecasts = "; MSE / MAE for a forecast (lower is better)" if any(row_metric(r) == "mse" for r in done) else ""
    if tested:
        return "test accuracy in %" + forecasts
    return "accuracy in % on the split named in each column (test where the task has one)" + forecasts


# --- Table 6: steps to convergence ------------------------------------------------------------


def run_convergence(run_dir) -> Convergence:
    """Where one run converged, from its whole-split evaluations during training (metrics.jsonl),
    with the chance check where they record the split's majority share (runs made before it was recorded: none).
    A regression run's (a forecast): on its MSE, lower is better (fpt.experiments.convergence)."""
    records = whole_split(RunDir(run_dir).read_metrics())
    if records and is_regression(records[0]):
        return convergence([(int(r["step"]), float(r["mse"])) for r in records], metric="mse")
    history = [(int(r["step"]), float(r["accuracy"])) for r in records]
    if records and all(r.get("majority_share") is not None and r.get("examples") for r in records):
        chance = (max(r["majority_share"] for r in records), min(int(r["examples"]) for r in records))
        return convergence(history, chance=chance)
    return convergence(history)


@dataclass
class StepsCell:
    """One cell of Table 6 (steps to converge): the converged runs' steps and plateaus, how many runs finished,
    the longest budget among them, and the cell's text."""

    steps: list[int]  # the converged runs' steps
    plateaus: list[float]  # the plateaus they converged to: accuracy in percent, or a regression run's MSE
    runs: int  # finished runs
    budget: int  # the most steps any of them ran
    text: str  # what the table cell says


def steps_data(
    rows: list[dict], row_key: str = "variant"
) -> tuple[list[str], list[str], dict[tuple[str, str], StepsCell]]:
    """(tasks, row labels, (row, task) -> StepsCell) for Table 6."""
    tasks = _tasks(rows)
    labels = list(dict.fromkeys(str(r.get(row_key, "fpt")) for r in rows))
    cells = {}
    for label in labels:
        for task in tasks:
            runs = [r for r in rows if str(r.get(row_key, "fpt")) == label and r["task"] == task]
            done = [r for r in runs if r["status"] == "done"]
            if not done:
                text = failure_text([r.get("failure") or "" for r in runs]) if runs else "not run"
                cells[(label, task)] = StepsCell([], [], 0, 0, text)
                continue
            found = [run_convergence(r["run_dir"]) for r in done]
            converged = [c for c in found if c.converged]
            budget = max(c.budget for c in found)
            plateaus = [c.score if c.metric == "mse" else 100 * c.score for c in converged]
            if converged:
                median = statistics.median(c.step for c in converged)
                plateau = statistics.median(plateaus)
                to = f"MSE {plateau:.3f}" if converged[0].metric == "mse" else f"{plateau:.1f}%"
                text = f"{median:g} ({len(converged)}/{len(done)} converged, to {to})"
            else:
                text = f"not converged within {budget} steps (0/{len(done)}: {found[0].why_not})"
            cells[(label, task)] = StepsCell([c.step for c in converged], plateaus, len(done), budget, text)
    return tasks, labels, cells


def steps_table(rows: list[dict], title: str, row_key: str = "variant") -> str:
    """Table 6: per variant the median step at which its runs converged (each to its own plateau,
    fpt.experiments.convergence), how many seeds converged and to what accuracy, and the speedup
    of fpt over random where both converged."""
    tasks, labels, cells = steps_data(rows, row_key)
    watched = {r.get("eval_split") or r.get("split") for r in rows if r["status"] == "done"}
    split = ", ".join(sorted(SPLIT_LABELS.get(s, s) for s in watched if s))
    regression = [r for r in rows if r["status"] == "done" and row_metric(r) == "mse"]
    definition = describe() + f" Accuracy during training, on the {split or 'evaluation'} split."
    if regression:  # a forecast's runs: their MSE, lower is better
        definition = (
            describe(metric="mse") + f" MSE during training, on the {split or 'evaluation'} split."
            if len(regression) == sum(r["status"] == "done" for r in rows)
            else definition + " " + describe(metric="mse")
        )
    lines = [
        f"### {title}",
        "",
        definition,
        "",
        "| | " + " | ".join(TASK_COLUMNS.get(t, t) for t in tasks) + " |",
        "|---" * (len(tasks) + 1) + "|",
    ]
    for label in labels:
        texts = []
        for task in tasks:
            paper = PAPER_STEPS.get(label, {}).get(task)
            texts.append(cells[(label, task)].text + (f" (paper {paper:.0e})" if paper is not None else ""))
        lines.append(f"| {label} | " + " | ".join(texts) + " |")
    if "fpt" in labels and "random" in labels:
        speedups = []
        for task in tasks:
            fpt, random = cells[("fpt", task)].steps, cells[("random", task)].steps
            paper = (
                PAPER_STEPS["random"].get(task, 0) / PAPER_STEPS["fpt"][task] if task in PAPER_STEPS["fpt"] else None
            )
            paper_text = f" (paper {paper:.1f}x)" if paper else ""
            if fpt and random:
                speedups.append(f"{statistics.median(random) / statistics.median(fpt):.1f}x{paper_text}")
            else:
                missing = " and ".join(v for v, s in (("fpt", fpt), ("random", random)) if not s)
                speedups.append(f"n/a ({missing} not converged){paper_text}")
        lines.append("| speedup random/fpt | " + " | ".join(speedups) + " |")
    return "\n".join(lines) + "\n"


def failure_summary(rows: list[dict]) -> str | None:
    """How many runs failed, by kind, in one line; None when none did (skipped cells were asked for,
    and are neither failures nor runs)."""
    failed = [r for r in rows if r["status"] == "failed"]
    if not failed:
        return None
    ran = sum(r["status"] != "skipped" for r in rows)
    kinds = collections.Counter(FAILURE_TEXTS.get(r.get("failure"), "other errors") for r in failed)
    return f"{len(failed)} of {ran} runs failed [{'; '.join(f'{kind}: {n}' for kind, n in kinds.most_common())}]"


def failed_runs_section(rows: list[dict]) -> str:
    """The "Failed runs" list under a table, one line a run; empty when none failed."""
    failed = [r for r in rows if r["status"] == "failed"]
    return (
        "\nFailed runs:\n" + "".join(f"- {Path(r['run_dir']).name}: {r['error']}\n" for r in failed) if failed else ""
    )


def stopped_runs_section(rows: list[dict]) -> str:
    """The "Stopped runs" list under a table (cells max_minutes stopped, to continue); empty when none."""
    stopped = [r for r in rows if r["status"] == STOPPED]
    return (
        "\nStopped runs (run the sweep again to continue them):\n"
        + "".join(f"- {Path(r['run_dir']).name}: {r['error']}\n" for r in stopped)
        if stopped
        else ""
    )
