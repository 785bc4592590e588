"""Converged numbers: each cell trained to its target or budget, resumable across sittings.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/converge.py                      # every cell, in order
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/converge.py --cells mnist-fpt-fast-seed0 --minutes 50
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/converge.py --table-only          # just rewrite the table

Each cell is one run directory under benchmarks/results/converge/ (config, metrics, checkpoint:
a few MB, committed), started with `fpt train` or continued with `fpt train --resume`. A sitting
(`--minutes`) stops a cell mid-way (it keeps its last checkpoint) and the next sitting
resumes it; every sitting is appended to the cell's sittings.jsonl (machine, steps, wall time), so
the table can say which runs were resumed and how often. Writes results.md (ours beside the
paper's, steps, training time, recipe, machine) and one learning-curve PNG per task.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fpt.checkpoint import checkpoint_step
from fpt.config import MAX_THREADS
from fpt.experiments.convergence import describe
from fpt.experiments.plots import curve_points, learning_curves
from fpt.experiments.tables import run_convergence
from fpt.runs import RunDir, is_subset, whole_split
from fpt.runtime import bf16_note, cpu_model, native_bf16, usable_cores

ROOT = Path(__file__).parent / "results" / "converge"


@dataclass(frozen=True)
class Cell:
    task: str
    variant: str  # what the curve is labelled with
    recipe: str
    args: tuple[str, ...]
    paper: float | None  # the paper's figure for this cell (GPT-2, Tables 1-2), percent
    target: float | None = None  # the target, percent: the step it is first reached is reported
    arm: str = "fpt"  # what is compared across recipes: the pretrained backbone, its random init, ...
    after: str | None = None  # a cell whose finished run this one builds on (see `prepare`)

    @property
    def seed(self) -> int:
        return int(self.args[self.args.index("--seed") + 1])


PAPER_RECIPE = ("--recipe", "paper")
# The fast recipe had dropout 0.1 until validation chose 0 (benchmarks/results/recipe_probe/):
# the cells run before then keep it, so that a rerun reproduces the committed run.
FAST_WITH_PAPER_DROPOUT = ("--recipe", "fast", "--dropout", "0.1")
CELLS: dict[str, Cell] = {
    "mnist-fpt-paper-seed0": Cell(
        "mnist",
        "fpt, paper recipe",
        "paper",
        PAPER_RECIPE + ("--steps", "30000", "--eval-every", "2000", "--seed", "0"),
        paper=98.0,
        target=98.0,
    ),
    "mnist-random-paper-seed0": Cell(
        "mnist",
        "random init, paper recipe",
        "paper",
        PAPER_RECIPE + ("--init", "random", "--steps", "30000", "--eval-every", "2000", "--seed", "0"),
        paper=91.7,
        arm="random init",
    ),
    "mnist-fpt-fast-seed0": Cell(
        "mnist",
        "fpt, fast recipe, dropout 0.1",
        "fast",
        FAST_WITH_PAPER_DROPOUT + ("--steps", "8000", "--eval-every", "500", "--seed", "0"),
        paper=98.0,
        target=98.0,
    ),
    # the same recipe on half the budget (its cosine decays over 4,000 steps)
    "mnist-fpt-fast4k-seed0": Cell(
        "mnist",
        "fpt, fast recipe, dropout 0.1, 4,000 steps",
        "fast",
        FAST_WITH_PAPER_DROPOUT + ("--steps", "4000", "--eval-every", "500", "--seed", "0"),
        paper=98.0,
    ),
    # twice the budget, for the 98% the 8,000-step run missed (97.36)
    "mnist-fpt-fast16k-seed0": Cell(
        "mnist",
        "fpt, fast recipe, dropout 0.1, 16,000 steps",
        "fast",
        FAST_WITH_PAPER_DROPOUT + ("--steps", "16000", "--eval-every", "1000", "--seed", "0"),
        paper=98.0,
        target=98.0,
    ),
    "mnist-random-fast-seed0": Cell(
        "mnist",
        "random init, fast recipe, dropout 0.1",
        "fast",
        FAST_WITH_PAPER_DROPOUT + ("--init", "random", "--steps", "8000", "--eval-every", "500", "--seed", "0"),
        paper=91.7,
        arm="random init",
    ),
    "fashion-mnist-fpt-fast-seed0": Cell(
        "fashion-mnist",
        "fpt, fast recipe, dropout 0.1",
        "fast",
        FAST_WITH_PAPER_DROPOUT + ("--steps", "8000", "--eval-every", "500", "--seed", "0"),
        paper=None,
        target=90.0,
    ),
    "fashion-mnist-random-fast-seed0": Cell(
        "fashion-mnist",
        "random init, fast recipe, dropout 0.1",
        "fast",
        FAST_WITH_PAPER_DROPOUT + ("--init", "random", "--steps", "8000", "--eval-every", "500", "--seed", "0"),
        paper=None,
        arm="random init",
    ),
    # Without dropout, as the fast recipe has been since validation chose it (benchmarks/results/
    # recipe_probe/: Fashion-MNIST and MNIST, 5,000 training images held out); said explicitly
    "mnist-fpt-fast16k-dropout0-seed0": Cell(
        "mnist",
        "fpt, fast recipe, dropout 0, 16,000 steps",
        "fast",
        ("--recipe", "fast", "--dropout", "0", "--steps", "16000", "--eval-every", "1000", "--seed", "0"),
        paper=98.0,
        target=98.0,
    ),
    # the same recipe and budget from random init: the twin the issue asks for beside the 98.15
    "mnist-random-fast16k-dropout0-seed0": Cell(
        "mnist",
        "random init, fast recipe, dropout 0, 16,000 steps",
        "fast",
        (
            "--recipe",
            "fast",
            "--dropout",
            "0",
            "--init",
            "random",
            "--steps",
            "16000",
            "--eval-every",
            "1000",
            "--seed",
            "0",
        ),
        paper=91.7,
        arm="random init",
    ),
    # the headline run on seeds 1 and 2: how far 98.15 is one seed's luck
    **{
        f"mnist-fpt-fast16k-dropout0-seed{seed}": Cell(
            "mnist",
            f"fpt, fast recipe, dropout 0, 16,000 steps, seed {seed}",
            "fast",
            ("--recipe", "fast", "--dropout", "0", "--steps", "16000", "--eval-every", "1000", "--seed", str(seed)),
            paper=98.0,
            target=98.0,
        )
        for seed in (1, 2)
    },
    "fashion-mnist-fpt-fast-dropout0-seed0": Cell(
        "fashion-mnist",
        "fpt, fast recipe, dropout 0",
        "fast",
        ("--recipe", "fast", "--dropout", "0", "--steps", "8000", "--eval-every", "500", "--seed", "0"),
        paper=None,
        target=90.0,
    ),
    # twice the budget, for the 90% the 8,000-step run missed (87.89)
    "fashion-mnist-fpt-fast16k-dropout0-seed0": Cell(
        "fashion-mnist",
        "fpt, fast recipe, dropout 0, 16,000 steps",
        "fast",
        ("--recipe", "fast", "--dropout", "0", "--steps", "16000", "--eval-every", "1000", "--seed", "0"),
        paper=None,
        target=90.0,
    ),
    # the 16,000-step run's twin from random init: the same recipe, budget and seed
    "fashion-mnist-random-fast16k-dropout0-seed0": Cell(
        "fashion-mnist",
        "random init, fast recipe, dropout 0, 16,000 steps",
        "fast",
        (
            "--recipe",
            "fast",
            "--dropout",
            "0",
            "--init",
            "random",
            "--steps",
            "16000",
            "--eval-every",
            "1000",
            "--seed",
            "0",
        ),
        paper=None,
        arm="random init",
    ),
    # Toward the 90% the 16,000-step run missed (88.14; it scored 93.06 on the first 5,000 of its own training
    # images, so it had begun to overfit): augmentation (shifts of up to 2 pixels, mirroring), chosen
    # against the same run without it on 5,000 training images held out as 'val'; test by hand at the end.
    # Validation chose no augmentation (89.24 against 87.22); then mean pooling over the 49 patch tokens
    # in place of the last token's state, against the same control: level (89.30 against 89.24).
    **{
        f"fashion-mnist-fpt-fast16k-dropout0{tag}-val5k-seed0": Cell(
            "fashion-mnist",
            f"fpt, fast recipe, dropout 0, 16,000 steps, {label}, val 5k",
            "fast",
            (
                "--recipe",
                "fast",
                "--dropout",
                "0",
                "--steps",
                "16000",
                "--eval-every",
                "1000",
                "--val-size",
                "5000",
                *extra,
                "--seed",
                "0",
            ),
            paper=None,
            target=90.0,
        )
        for tag, label, extra in (
            ("", "no augmentation", ()),
            ("-augment", "shifts and mirroring", ("--augment",)),
            ("-mean", "mean pooling", ("--pooling", "mean")),
        )
    },
    # The one lever left untried: a longer budget (8,000 -> 16,000 steps bought 0.25 points on
    # test); the control's settings on twice its steps, its cosine decaying over all 32,000. The
    # learning rate stays 3e-3: on val at 2,000 steps 1e-3 to 1e-2 ran level and 3e-2 fell behind
    # (benchmarks/results/recipe_probe/fashion_lr). And the control on seeds 1 and 2, for how far
    # one seed's val and test move.
    "fashion-mnist-fpt-fast32k-dropout0-val5k-seed0": Cell(
        "fashion-mnist",
        "fpt, fast recipe, dropout 0, 32,000 steps, no augmentation, val 5k",
        "fast",
        (
            "--recipe",
            "fast",
            "--dropout",
            "0",
            "--steps",
            "32000",
            "--eval-every",
            "1000",
            "--val-size",
            "5000",
            "--seed",
            "0",
        ),
        paper=None,
        target=90.0,
    ),
    **{
        f"fashion-mnist-fpt-fast16k-dropout0-val5k-seed{seed}": Cell(
            "fashion-mnist",
            f"fpt, fast recipe, dropout 0, 16,000 steps, no augmentation, val 5k, seed {seed}",
            "fast",
            (
                "--recipe",
                "fast",
                "--dropout",
                "0",
                "--steps",
                "16000",
                "--eval-every",
                "1000",
                "--val-size",
                "5000",
                "--seed",
                str(seed),
            ),
            paper=None,
            target=90.0,
        )
        for seed in (1, 2)
    },
    "fashion-mnist-random-fast-dropout0-seed0": Cell(
        "fashion-mnist",
        "random init, fast recipe, dropout 0",
        "fast",
        (
            "--recipe",
            "fast",
            "--dropout",
            "0",
            "--init",
            "random",
            "--steps",
            "8000",
            "--eval-every",
            "500",
            "--seed",
            "0",
        ),
        paper=None,
        arm="random init",
    ),
    # ListOps, LRA protocol (brackets kept, up to 2,000 tokens): the paper's FPT converges at about
    # 2e3 steps of 16 (Table 6); 1,000 of 32 is as many expressions. A step takes 21-30 s here on average
    # (50-step means; longer buckets cost more), so this runs over several sittings: a checkpoint each 50 steps, scored
    # on the first 500 val expressions (the whole val split at the end, test after it, by hand);
    # no dropout, so micro-batches of 8 give the batch's gradient in less memory.
    "listops-fpt-fast-seed0": Cell(
        "listops",
        "fpt, fast recipe, LRA input (brackets kept, 2,000 tokens)",
        "fast",
        (
            "--recipe",
            "fast",
            "--protocol",
            "lra",
            "--bucket-window",
            "8",
            "--micro-batch-size",
            "8",
            "--steps",
            "1000",
            "--eval-every",
            "50",
            "--eval-subset",
            "500",
            "--seed",
            "0",
        ),
        paper=38.4,
        target=38.4,
    ),
    # the same with the official FPT code's input (`--protocol paper`: brackets stripped, 512 tokens),
    # for comparison with the paper's 38.4, which was measured on that input; no target, since
    # without brackets the answer is not determined by the input
    "listops-fpt-fast-paper-protocol-seed0": Cell(
        "listops",
        "fpt, fast recipe, paper's input (no brackets, 512 tokens)",
        "fast",
        (
            "--recipe",
            "fast",
            "--protocol",
            "paper",
            "--bucket-window",
            "8",
            "--micro-batch-size",
            "8",
            "--steps",
            "1000",
            "--eval-every",
            "50",
            "--eval-subset",
            "500",
            "--seed",
            "0",
        ),
        paper=38.4,
        arm="paper's input",
    ),
    # Bit Memory: the paper's FPT converges at about 1e4 steps (Table 6), its random init at 4e4
    # to 75.8%; 500 held-out examples, every one of them scored at each evaluation.
    "bit-memory-fpt-fast-seed0": Cell(
        "bit-memory",
        "fpt, fast recipe, dropout 0.1",
        "fast",
        FAST_WITH_PAPER_DROPOUT + ("--steps", "20000", "--eval-every", "1000", "--seed", "0"),
        paper=100.0,
        target=99.0,
    ),
    # the fast run again, scored on every held-out example each 100 steps: its first evaluation
    # (step 1,000) was already past 99%, so when it got there was unknown
    "bit-memory-fpt-fast-eval100-seed0": Cell(
        "bit-memory",
        "fpt, fast recipe, dropout 0.1, scored each 100 steps",
        "fast",
        FAST_WITH_PAPER_DROPOUT + ("--steps", "20000", "--eval-every", "100", "--seed", "0"),
        paper=100.0,
        target=99.0,
    ),
    # the fast recipe as it now stands (dropout 0, chosen on MNIST and Fashion-MNIST validation),
    # scored each 100 steps like the run above
    "bit-memory-fpt-fast-dropout0-eval100-seed0": Cell(
        "bit-memory",
        "fpt, fast recipe, dropout 0, scored each 100 steps",
        "fast",
        ("--recipe", "fast", "--dropout", "0", "--steps", "20000", "--eval-every", "100", "--seed", "0"),
        paper=100.0,
        target=99.0,
    ),
    # the same on seeds 1 and 2 (first run on a CPU that emulates bf16: the recipe trained them in fp32)
    **{
        f"bit-memory-fpt-fast-dropout0-eval100-seed{seed}": Cell(
            "bit-memory",
            f"fpt, fast recipe, dropout 0, scored each 100 steps, seed {seed}",
            "fast",
            ("--recipe", "fast", "--dropout", "0", "--steps", "20000", "--eval-every", "100", "--seed", str(seed)),
            paper=100.0,
            target=99.0,
        )
        for seed in (1, 2)
    },
    "bit-memory-fpt-paper-seed0": Cell(
        "bit-memory",
        "fpt, paper recipe",
        "paper",
        PAPER_RECIPE + ("--steps", "40000", "--eval-every", "500", "--seed", "0"),
        paper=100.0,
        target=99.0,
    ),
    # The paper's "Bit" backbone: MiniLM trained from random init, every weight, on Bit Memory to
    # 99% (the paper recipe: the fast one's rate is for a few trained tensors), exported, then
    # frozen under MNIST at the fast4k cell's budget. The Bit Memory run's checkpoint holds every
    # weight and Adam's moments (~131 MB): not committed, so the MNIST cell must finish in the
    # session that trained it (or the Bit Memory cell be rerun).
    "bit-memory-full-random-seed0": Cell(
        "bit-memory",
        "every weight trained from random init (Bit backbone)",
        "paper",
        PAPER_RECIPE
        + ("--init", "random", "--policy", "full", "--steps", "40000", "--eval-every", "100", "--seed", "0"),
        paper=None,
        target=99.0,
        arm="full, random init",
    ),
    "mnist-bit-fast4k-seed0": Cell(
        "mnist",
        "Bit backbone frozen, fast recipe, dropout 0.1, 4,000 steps",
        "fast",
        FAST_WITH_PAPER_DROPOUT + ("--init", "bit", "--steps", "4000", "--eval-every", "500", "--seed", "0"),
        paper=97.8,
        arm="Bit backbone",
        after="bit-memory-full-random-seed0",
    ),
}


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


def sit(name: str, cell: Cell, minutes: float | None, threads: int) -> bool:
    """Start or continue one cell for at most `minutes` (`fpt train --max-minutes`); log the
    sitting. False where its `fpt train` failed (not where the sitting's time ended it, exit 0,
    nor where the cell has to wait)."""
    run = ROOT / name
    before = _last_step(run)
    summary = RunDir(run).read_summary()
    if summary is not None and summary["step"] == before and _done(run, summary):
        print(f"{name}: finished at step {summary['step']}")
        return True
    if cell.after is not None and not prepare(cell.after):
        return True
    begun = (run / RunDir.CONFIG).is_file()
    if begun and native_bf16() is False and RunDir(run).read_config().get("precision") == "bf16":
        # measured: 25 s a Fashion-MNIST step in emulated bf16 against 0.6 where native; and a run
        # continues in its own precision, or it would not end where an uninterrupted one does
        print(
            f"{name}: began in bf16, which this CPU emulates (about 20 times slower than fp32): continue it on one "
            f"with native bf16 (`fpt info` says)"
        )
        return True
    command = [sys.executable, "-m", "fpt", "train", "--threads", str(threads), "--no-progress"]
    command += ["--resume", str(run)] if begun else ["--task", cell.task, *cell.args, "--out", str(run)]
    if cell.target is not None and not begun:
        command += ["--target-accuracy", str(cell.target / 100)]
    if minutes is not None:  # fpt ends the sitting itself: after a step, with a checkpoint, exit 0
        command += ["--max-minutes", str(minutes)]
    started = time.time()
    process = subprocess.Popen(command, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    stopped: BaseException | None = None
    try:
        process.wait()
    except BaseException as exc:  # this script was stopped (Ctrl-C, kill): the rest of the cells do not run
        # SIGTERM, not SIGINT (a shell's background jobs ignore SIGINT): fpt finishes the step under
        # way and checkpoints it, so the next sitting loses nothing
        process.terminate()
        process.wait()
        stopped = exc
    if run.is_dir():
        record = {
            "started": time.strftime("%Y-%m-%d %H:%M", time.gmtime(started)),
            "from_step": before,
            "to_step": _last_step(run),
            "wall_s": round(time.time() - started),
            "threads": threads,
            "machine": f"{cpu_model()}, {usable_cores()} cores; {bf16_note()}",
            "exit": process.returncode,
        }
        with open(run / "sittings.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")
        print(f"{name}: steps {before} -> {record['to_step']} in {record['wall_s']} s")
    else:  # fpt refused to start (it said why, e.g. data to fetch first): no sitting
        print(f"{name}: fpt train exited {process.returncode} before making its run directory")
    if stopped is not None:
        raise stopped
    return process.returncode == 0


def last_sitting_machine() -> str:
    """The machine the latest logged sitting of any cell ran on (a --table-only run sits nowhere)."""
    sittings = [json.loads(line) for path in ROOT.glob("*/sittings.jsonl") for line in path.read_text().splitlines()]
    if not sittings:
        return f"{cpu_model()}; {bf16_note()} (none logged: this one)"
    return max(sittings, key=lambda s: s["started"])["machine"]


def prepare(after: str) -> bool:
    """Export the finished run of cell `after` as the Bit backbone (`fpt export-backbone`, to where
    --init bit looks); False, said, while that run has not finished."""
    run = RunDir(ROOT / after)
    if not run.is_finished:
        print(f"waits for {after}: run it first (benchmarks/converge.py --cells {after})")
        return False
    if not run.has_checkpoint:  # not committed (see the cell): a new machine trains it again
        print(f"{after} has no checkpoint here: move its directory aside and run that cell again")
        return False
    subprocess.run([sys.executable, "-m", "fpt", "export-backbone", str(run.path)], check=True)
    return True


def _last_step(run: Path) -> int:
    """Where a resume starts: the checkpoint's step (a stop on SIGTERM saves one between evaluations)."""
    run_dir = RunDir(run)
    if run_dir.has_checkpoint:
        return checkpoint_step(run_dir.checkpoint_path)
    records = run_dir.read_metrics() if (run / RunDir.CONFIG).is_file() else []
    return records[-1]["step"] if records else 0


def _configured_steps(run: Path) -> int:
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


def recipes_side_by_side() -> str:
    """Time to the same accuracy under both recipes, per task and arm: the accuracy is the lower of
    the two runs' best whole-split scores, so both reached it, each counted at its first whole-split
    evaluation at or above it (a fast-recipe run scores only a subset in between: an upper bound)."""
    lines = [
        "| task | arm | fast-recipe cell | accuracy both reached | paper recipe: first at | fast recipe: first at | "
        "wall time ratio | idle-machine training time (steps x step time): paper / fast, ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    started = {name: c for name, c in CELLS.items() if (ROOT / name / RunDir.CONFIG).is_file()}
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


def across_seeds() -> str:
    """Final whole-split accuracy of each cell that was run on several seeds (cells named alike
    but for their -seedN ending), once at least two of them have finished: at their last step, or
    earlier where they reached their target (--target-accuracy stops a run there)."""
    groups: dict[str, list[tuple[int, int, float]]] = {}
    for name, cell in CELLS.items():
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


def table6() -> str:
    """The paper's Table 6 definition (steps to each run's own plateau) on the paper-recipe cells,
    from their whole-split evaluations."""
    lines = [
        describe(),
        "",
        "| cell | converged | to (its plateau; best so far where not converged) | evaluations |",
        "|---|---|---|---|",
    ]
    for name, cell in CELLS.items():
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


def table() -> str:
    lines = [
        "| cell | recipe | paper | ours: last | best | steps | training time | target: first reached | sittings |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows, notes = [], []
    for name, cell in CELLS.items():
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
        sittings = (run / "sittings.jsonl").read_text().splitlines() if (run / "sittings.jsonl").is_file() else []
        for number, sitting in enumerate(map(json.loads, sittings), 1):
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
        # runs scored on training images held out as val get their own figure: their scores are
        # not comparable with the test-scored runs' (and were what chose between settings)
        figure = cell.task + ("-val" if "--val-size" in cell.args else "")
        rows.append(
            {"status": "done", "run_dir": str(run), "task": cell.task, "variant": cell.variant, "figure": figure}
        )
    for figure in dict.fromkeys(r["figure"] for r in rows):
        learning_curves([r for r in rows if r["figure"] == figure], ROOT / f"curves_{figure}.png")
    if notes:
        lines += ["", "Notes kept with the sittings:", "", *notes]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--cells", help=f"comma list (default: all): {', '.join(CELLS)}")
    parser.add_argument("--minutes", type=float, help="at most this long per cell in this sitting")
    parser.add_argument("--threads", type=int, default=usable_cores())
    parser.add_argument("--table-only", action="store_true")
    args = parser.parse_args()
    names = args.cells.split(",") if args.cells else list(CELLS)
    unknown = [n for n in names if n not in CELLS]
    if unknown:
        parser.error(f"unknown cells {', '.join(unknown)}")
    if not 1 <= args.threads <= MAX_THREADS:
        parser.error(f"--threads must be 1 to {MAX_THREADS}, got {args.threads}")
    if args.minutes is not None and not (args.minutes > 0 and math.isfinite(args.minutes)):
        parser.error(f"--minutes must be a positive number, got {args.minutes}")
    failed = []
    if not args.table_only:
        # `kill` (SIGTERM) becomes an exception, so `sit` stops its fpt run and logs the sitting
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
        failed = [name for name in names if not sit(name, CELLS[name], args.minutes, args.threads)]
    text = table()
    side_by_side = recipes_side_by_side()
    if side_by_side:
        text += (
            "\nThe two recipes to the same accuracy, seed 0. Wall times as recorded: sittings on the "
            "machines of their sessions, with other work on the other core; the last column times both "
            "recipes in one go on one idle machine (benchmarks/recipe_speed.py, 1 thread):\n\n" + side_by_side
        )
    seeds = across_seeds()
    if seeds:
        text += "\nThe same cell on several seeds (sample standard deviation):\n\n" + seeds
    text += "\nTable 6's definition on the paper-recipe runs:\n\n" + table6()
    (ROOT / "results.md").write_text(f"Machine of the last sitting: {last_sitting_machine()}\n\n{text}")
    print(text)
    if failed:  # the table above holds what the others reached; a script learns it is incomplete
        print(
            f"converge.py: {len(failed)} cell(s) failed: {', '.join(failed)} (see each one's output above)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
