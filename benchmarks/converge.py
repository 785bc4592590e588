"""Converged numbers: results.md and the learning curves of the converged runs, read from their run directories.

The runs are made by `fpt sweep` from the specs in benchmarks/specs/converge-*.yaml (each cell's
recipe, its target and where its run directory is), each cell trained to its target or its steps
over as many sittings as it takes (the specs' `max_minutes` a sitting; the same command continues):

    HF_HUB_OFFLINE=1 fpt sweep benchmarks/specs/converge-mnist.yaml      # and -fashion-mnist, ...
    python benchmarks/converge.py                                         # then rewrite the tables

Each cell is one run directory under benchmarks/results/converge/ (config, metrics, checkpoint:
a few MB, committed); every sitting is appended to its sittings.jsonl (machine, steps, wall time),
so the table can say which runs were resumed and how often. Writes results.md (ours beside the
paper's, steps, training time, recipe, machine) and one learning-curve PNG per task.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from fpt.core.runtime import bf16_note, cpu_model
from fpt.experiments.convergence import describe
from fpt.experiments.plots import curve_points, learning_curves
from fpt.experiments.sittings import read_sittings
from fpt.experiments.sweep_spec import load_spec
from fpt.experiments.tables import run_convergence
from fpt.training.run_dir import RunDir, is_subset, whole_split

ROOT = Path(__file__).parent / "results" / "converge"
SPECS = Path(__file__).parent / "specs"

# How each cell is shown, in the table's order: its curve's label, the paper's figure for it
# (GPT-2, Tables 1-2, percent) and its arm, what is compared across recipes (the pretrained
# backbone, its random init, ...). How each was trained is its spec's (benchmarks/specs/).
SHOWN: dict[str, tuple[str, float | None, str]] = {
    "mnist-fpt-paper-seed0": ("fpt, paper recipe", 98.0, "fpt"),
    "mnist-random-paper-seed0": ("random init, paper recipe", 91.7, "random init"),
    "mnist-fpt-fast-seed0": ("fpt, fast recipe, dropout 0.1", 98.0, "fpt"),
    "mnist-fpt-fast4k-seed0": ("fpt, fast recipe, dropout 0.1, 4,000 steps", 98.0, "fpt"),
    "mnist-fpt-fast16k-seed0": ("fpt, fast recipe, dropout 0.1, 16,000 steps", 98.0, "fpt"),
    "mnist-random-fast-seed0": ("random init, fast recipe, dropout 0.1", 91.7, "random init"),
    "fashion-mnist-fpt-fast-seed0": ("fpt, fast recipe, dropout 0.1", None, "fpt"),
    "fashion-mnist-random-fast-seed0": ("random init, fast recipe, dropout 0.1", None, "random init"),
    "mnist-fpt-fast16k-dropout0-seed0": ("fpt, fast recipe, dropout 0, 16,000 steps", 98.0, "fpt"),
    "mnist-random-fast16k-dropout0-seed0": ("random init, fast recipe, dropout 0, 16,000 steps", 91.7, "random init"),
    **{
        f"mnist-fpt-fast16k-dropout0-seed{seed}": (
            f"fpt, fast recipe, dropout 0, 16,000 steps, seed {seed}",
            98.0,
            "fpt",
        )
        for seed in (1, 2)
    },
    "fashion-mnist-fpt-fast-dropout0-seed0": ("fpt, fast recipe, dropout 0", None, "fpt"),
    "fashion-mnist-fpt-fast16k-dropout0-seed0": ("fpt, fast recipe, dropout 0, 16,000 steps", None, "fpt"),
    "fashion-mnist-random-fast16k-dropout0-seed0": (
        "random init, fast recipe, dropout 0, 16,000 steps",
        None,
        "random init",
    ),
    **{
        f"fashion-mnist-fpt-fast16k-dropout0{tag}-val5k-seed0": (
            f"fpt, fast recipe, dropout 0, 16,000 steps, {label}, val 5k",
            None,
            "fpt",
        )
        for tag, label in (("", "no augmentation"), ("-augment", "shifts and mirroring"), ("-mean", "mean pooling"))
    },
    "fashion-mnist-fpt-fast32k-dropout0-val5k-seed0": (
        "fpt, fast recipe, dropout 0, 32,000 steps, no augmentation, val 5k",
        None,
        "fpt",
    ),
    **{
        f"fashion-mnist-fpt-fast16k-dropout0-val5k-seed{seed}": (
            f"fpt, fast recipe, dropout 0, 16,000 steps, no augmentation, val 5k, seed {seed}",
            None,
            "fpt",
        )
        for seed in (1, 2)
    },
    "fashion-mnist-random-fast-dropout0-seed0": ("random init, fast recipe, dropout 0", None, "random init"),
    "listops-fpt-fast-seed0": ("fpt, fast recipe, LRA input (brackets kept, 2,000 tokens)", 38.4, "fpt"),
    "listops-fpt-fast-paper-protocol-seed0": (
        "fpt, fast recipe, paper's input (no brackets, 512 tokens)",
        38.4,
        "paper's input",
    ),
    "bit-memory-fpt-fast-seed0": ("fpt, fast recipe, dropout 0.1", 100.0, "fpt"),
    "bit-memory-fpt-fast-eval100-seed0": ("fpt, fast recipe, dropout 0.1, scored each 100 steps", 100.0, "fpt"),
    "bit-memory-fpt-fast-dropout0-eval100-seed0": ("fpt, fast recipe, dropout 0, scored each 100 steps", 100.0, "fpt"),
    **{
        f"bit-memory-fpt-fast-dropout0-eval100-seed{seed}": (
            f"fpt, fast recipe, dropout 0, scored each 100 steps, seed {seed}",
            100.0,
            "fpt",
        )
        for seed in (1, 2)
    },
    "bit-memory-fpt-paper-seed0": ("fpt, paper recipe", 100.0, "fpt"),
    "bit-memory-full-random-seed0": ("every weight trained from random init (Bit backbone)", None, "full, random init"),
    "mnist-bit-fast4k-seed0": ("Bit backbone frozen, fast recipe, dropout 0.1, 4,000 steps", 97.8, "Bit backbone"),
}


@dataclass(frozen=True)
class Cell:
    """A converged-run cell as the tables use it: from its spec, and from SHOWN."""

    task: str
    variant: str  # what the curve is labelled with
    recipe: str
    seed: int
    paper: float | None  # the paper's figure for this cell, percent
    target: float | None  # the spec's target, percent: the step it is first reached is reported
    arm: str
    figure: str  # the learning-curve figure it is drawn in


def load_cells(specs: Path = SPECS) -> dict[str, Cell]:
    """Every cell of the converge specs, in SHOWN's order; a cell in one but not the other, or in two
    specs, is refused."""
    given: dict[str, dict] = {}
    for path in sorted(specs.glob("converge-*.yaml")):
        spec = load_spec(path)
        for cell in spec.cells():
            if cell.name in given:  # two specs would train it into one directory
                raise SystemExit(f"converge.py: cell {cell.name} is in two specs; keep it in one")
            given[cell.name] = {**spec.options, **cell.values}
    if given.keys() != SHOWN.keys():
        raise SystemExit(
            f"converge.py: cells in the specs but not in SHOWN: {sorted(given.keys() - SHOWN.keys())}; "
            f"in SHOWN but in no spec: {sorted(SHOWN.keys() - given.keys())}"
        )
    cells = {}
    for name, (variant, paper, arm) in SHOWN.items():
        options = given[name]
        target = options.get("target_accuracy")
        # runs scored on training images held out as val get their own figure: their scores are
        # not comparable with the test-scored runs' (and were what chose between settings)
        figure = options["task"] + ("-val" if options.get("val_size") else "")
        recipe = options.get("recipe", "paper")
        seed = options.get("seed", 0)
        cells[name] = Cell(
            options["task"], variant, recipe, seed, paper, None if target is None else 100 * target, arm, figure
        )
    return cells


def training_seconds(records: list[dict]) -> list[float]:
    """Training time from step 0 at each record. Runs resumed before fpt counted elapsed_s across
    resumes restart it at 0: a drop marks a resume, and the time before it is added back."""
    total, offset, previous = [], 0.0, 0.0
    for record in records:
        elapsed = record.get("elapsed_s", 0.0)
        if elapsed < previous:
            offset += previous
        previous = elapsed
        total.append(offset + elapsed)
    return total


def last_sitting_machine() -> str:
    """The machine the latest logged sitting of any cell ran on (a table-only run sits nowhere)."""
    sittings = [sitting for path in ROOT.glob("*/") for sitting in read_sittings(path)]
    if not sittings:
        return f"{cpu_model()}; {bf16_note()} (none logged: this one)"
    return max(sittings, key=lambda s: s["started"])["machine"]


def _configured_steps(run: Path) -> int:
    """The steps the run was configured to train (its config.json)."""
    return json.loads((run / RunDir.CONFIG).read_text())["steps"]


def _done(run: Path, summary: dict) -> bool:
    """Whether a run that wrote `summary` has nothing left: it reached its target (which stops it) or its steps."""
    return summary["status"] == "target_reached" or summary["step"] >= _configured_steps(run)


def first_reaching(records: list[dict], target: float | None) -> tuple[int, float] | None:
    """(step, training seconds) of the first whole-split evaluation at or above `target` percent.
    Whole split only: a subset's score is noisier, and would flatter the run that uses one."""
    if target is None:
        return None
    for record, spent in zip(records, training_seconds(records)):
        if not is_subset(record) and 100 * record["accuracy"] >= target - 1e-9:
            return record["step"], spent
    return None


def step_times(task: str, threads: int = 1) -> dict[tuple[str, float], float]:
    """Seconds per training step of each (recipe, dropout) on an idle machine
    (benchmarks/recipe_speed.py; rows from before it timed dropout 0 were all at 0.1)."""
    path = ROOT.parent / "recipe_speed.json"
    record = json.loads(path.read_text()).get(task) if path.is_file() else None
    return {
        (row["recipe"], row.get("dropout", 0.1)): row["ms_per_step"] / 1000
        for row in (record or {}).get("rows", [])
        if row["threads"] == threads
    }


def recipes_side_by_side(cells: dict[str, Cell]) -> str:
    """Time to the same accuracy under both recipes, per task and arm: the accuracy is the lower of
    the two runs' best whole-split scores, so both reached it, each counted at its first whole-split
    evaluation at or above it (a fast-recipe run scores only a subset in between: an upper bound)."""
    lines = [
        "| task | arm | fast-recipe cell | accuracy both reached | paper recipe: first at | fast recipe: first at | "
        "wall time ratio | idle-machine training time (steps x step time): paper / fast, ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    started = {name: c for name, c in cells.items() if (ROOT / name / RunDir.CONFIG).is_file()}
    pairs = [
        (p, f)
        for p in started
        for f in started
        if started[p].recipe == "paper"
        and started[f].recipe == "fast"
        and (started[p].task, started[p].arm, started[p].seed) == (started[f].task, started[f].arm, started[f].seed)
    ]
    for paper_name, fast_name in pairs:
        task, arm = started[paper_name].task, started[paper_name].arm
        runs = [RunDir(ROOT / name).read_metrics() for name in (paper_name, fast_name)]
        if not all(whole_split(records) for records in runs):
            continue
        level = min(max(100 * r["accuracy"] for r in whole_split(records)) for records in runs)
        (paper_step, paper_s), (fast_step, fast_s) = (first_reaching(records, level) for records in runs)
        speed = step_times(task)
        paper_key, fast_key = (
            (started[name].recipe, RunDir(ROOT / name).read_config()["dropout"]) for name in (paper_name, fast_name)
        )
        idle = "not measured (benchmarks/recipe_speed.py)"
        if {paper_key, fast_key} <= speed.keys():
            paper_idle, fast_idle = paper_step * speed[paper_key], fast_step * speed[fast_key]
            idle = f"{paper_idle / 60:.0f} / {fast_idle / 60:.0f} min, {paper_idle / fast_idle:.1f}x"
        lines.append(
            f"| {task} | {arm} | {fast_name} | {level:.2f} | step {paper_step:,}, {paper_s / 60:.0f} min | "
            f"step {fast_step:,}, {fast_s / 60:.0f} min | {paper_s / max(fast_s, 1e-9):.1f}x | {idle} |"
        )
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def across_seeds(cells: dict[str, Cell]) -> str:
    """Final whole-split accuracy of each cell that was run on several seeds (cells named alike
    but for their -seedN ending), once at least two of them have finished: at their last step, or
    earlier where they reached their target (--target-accuracy stops a run there)."""
    groups: dict[str, list[tuple[int, int, float]]] = {}
    for name, cell in cells.items():
        summary = RunDir(ROOT / name).read_summary()
        if summary is None or not _done(ROOT / name, summary):
            continue
        last = RunDir(ROOT / name).read_metrics()[-1]
        stem = re.sub(r"-seed\d+$", "", name)
        groups.setdefault(stem, []).append((cell.seed, last["step"], 100 * last["accuracy"]))
    lines = ["| cells | seeds | final accuracy per seed (at step) | mean ± sd |", "|---|---|---|---|"]
    for stem, finished in groups.items():
        if len(finished) < 2:
            continue
        scores = [accuracy for _, _, accuracy in finished]
        each = ", ".join(f"{accuracy:.2f} (seed {seed}, {step:,})" for seed, step, accuracy in finished)
        lines.append(
            f"| {stem}-seed* | {len(finished)} | {each} | "
            f"{statistics.mean(scores):.2f} ± {statistics.stdev(scores):.2f} |"
        )
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def table6(cells: dict[str, Cell]) -> str:
    """The paper's Table 6 definition (steps to each run's own plateau) on the paper-recipe cells,
    from their whole-split evaluations."""
    lines = [
        describe(),
        "",
        "| cell | converged | to (its plateau; best so far where not converged) | evaluations |",
        "|---|---|---|---|",
    ]
    for name, cell in cells.items():
        if cell.recipe != "paper" or not (ROOT / name / RunDir.CONFIG).is_file():
            continue
        records = whole_split(RunDir(ROOT / name).read_metrics())
        result = run_convergence(ROOT / name)
        where = (
            f"step {result.step:,}" if result.converged else f"not within {result.budget:,} steps ({result.why_not})"
        )
        to = "" if result.accuracy is None else f"{100 * result.accuracy:.2f}" + ("" if result.converged else " (best)")
        lines.append(f"| {name} | {where} | {to} | {len(records)} |")
    return "\n".join(lines) + "\n"


def _where(record: dict) -> str:
    """Where an evaluation was made: its step, and its split when it scored only a subset."""
    return f"step {record['step']:,}" + (f", {record['split']}" if is_subset(record) else "")


def table(cells: dict[str, Cell]) -> str:
    """The main table, a row per started cell (ours beside the paper's, steps, time, target, sittings)
    and the sittings' notes under it; draws each figure's learning curves as it goes."""
    lines = [
        "| cell | recipe | paper | ours: last | best | steps | training time | target: first reached | sittings |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows, notes = [], []
    for name, cell in cells.items():
        run = ROOT / name
        if not (run / RunDir.CONFIG).is_file():
            continue
        everything = RunDir(run).read_metrics()
        records = curve_points(everything)  # a fast-recipe run scores a subset until its end
        if not records:
            continue
        seconds = training_seconds(everything)[-1]
        best = max(records, key=lambda r: r["accuracy"])
        reached = first_reaching(everything, cell.target)
        sittings = read_sittings(run)
        for number, sitting in enumerate(sittings, 1):
            if sitting.get("note"):  # what was logged by hand, and why
                notes.append(f"- {name}, sitting {number} (from step {sitting['from_step']:,}): {sitting['note']}")
        target = (
            ""
            if cell.target is None
            else f"{cell.target:g}%: "
            + (
                f"step {reached[0]:,}, {reached[1] / 60:.0f} min"
                if reached
                else "not reached"
                if records[-1]["step"] >= _configured_steps(run)
                else "not yet"
            )
        )
        lines.append(
            f"| {name} | {cell.recipe} | {'-' if cell.paper is None else f'{cell.paper:.1f}'} | "
            f"{100 * records[-1]['accuracy']:.2f} ({_where(records[-1])}) | "
            f"{100 * best['accuracy']:.2f} ({_where(best)}) | {records[-1]['step']:,} / "
            f"{_configured_steps(run):,} | {seconds / 60:.0f} min | {target} | {len(sittings)} |"
        )
        rows.append(
            {"status": "done", "run_dir": str(run), "task": cell.task, "variant": cell.variant, "figure": cell.figure}
        )
    for figure in dict.fromkeys(r["figure"] for r in rows):
        learning_curves([r for r in rows if r["figure"] == figure], ROOT / f"curves_{figure}.png")
    if notes:
        lines += ["", "Notes kept with the sittings:", "", *notes]
    return "\n".join(lines) + "\n"


def main() -> int:
    """Write results.md and the learning curves from the run directories; print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument(
        "--table-only", action="store_true", help="what it always does now (`fpt sweep` runs the cells)"
    )
    parser.parse_args()
    cells = load_cells()
    text = table(cells)
    side_by_side = recipes_side_by_side(cells)
    if side_by_side:
        text += (
            "\nThe two recipes to the same accuracy, seed 0. Wall times as recorded: sittings on the "
            "machines of their sessions, with other work on the other core; the last column times both "
            "recipes in one go on one idle machine (benchmarks/recipe_speed.py, 1 thread):\n\n" + side_by_side
        )
    seeds = across_seeds(cells)
    if seeds:
        text += "\nThe same cell on several seeds (sample standard deviation):\n\n" + seeds
    text += "\nTable 6's definition on the paper-recipe runs:\n\n" + table6(cells)
    (ROOT / "results.md").write_text(f"Machine of the last sitting: {last_sitting_machine()}\n\n{text}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
