"""The results tables of README.md and benchmarks/README.md, made from the committed files under benchmarks/results/.

    .venv/bin/python benchmarks/readme_tables.py             # rewrite every table where it lives
    .venv/bin/python benchmarks/readme_tables.py --check     # exit 1 naming each table the files disagree with
    .venv/bin/python benchmarks/readme_tables.py --print speed   # one table, to stdout

A table lives between `<!-- table:NAME -->` and `<!-- /table:NAME -->` in one file (HOMES: the
headline in README.md, every other table in benchmarks/README.md): what lies between the markers
is this script's output and nothing else, the prose around them is written by hand. Every figure
in a table is read or computed from a file; the script holds only labels, which rows to show and
how to word them. tests/test_readme_tables.py runs the check, so a table edited by hand, or a
result file changed without rerunning this script, fails the suite.

To add a run to the converged table: commit its run directory under benchmarks/results/ (config.json,
metrics.jsonl, summary.json; sittings.jsonl where converge.py ran it; evaluation.json where val
chose and test was scored once), add a `Converged` row below, run this script. The front page's
headline table is the `HEADLINES` list: a row there names the run directories it reads, one per seed.
Writing refuses while a run's summary.json or metrics.jsonl there is untracked (an unfinished sweep,
a run not yet added with `git add -f`): a table must quote only what a clone has.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fpt.experiments.convergence import convergence
from fpt.experiments.paper import PAPER, PAPER_STEPS
from fpt.experiments.tables import run_convergence, steps_data
from fpt.training.run_dir import is_subset, whole_split

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CONTROLS_CHART = "benchmarks/results/controls/controls.png"  # under the root: the controls table's picture
README = ROOT / "README.md"
WORDS = ["none", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def _json(path: Path):
    return json.loads(path.read_text())


def _jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _pct(accuracy: float) -> str:
    return f"{100 * accuracy:.2f}"


def _count(n: int) -> str:
    return WORDS[n] if n < len(WORDS) else str(n)


def _rate(value: float) -> str:
    """1e-3, 3e-3, 3e-05 -> '1e-3', '3e-3', '3e-5'."""
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# --- the headline: converged runs --------------------------------------------------------------


@dataclass(frozen=True)
class Converged:
    run: str  # a run directory, relative to benchmarks/results/
    task: str  # the task column's words
    note: str = ""  # what the row is for, after the recipe read from config.json
    bold: bool = False  # the row's headline figure in bold
    prior: bool = False  # also give the split's majority-label share (ListOps: chance is 1/10 only in name)


TASK_NAMES = {"mnist": "MNIST", "fashion-mnist": "Fashion-MNIST", "bit-memory": "Bit Memory", "listops": "ListOps"}
INITS = {"pretrained": "pretrained", "random": "random", "bit": "Bit backbone"}

CONVERGED = [
    Converged("converge/mnist-fpt-paper-seed0", "MNIST"),
    Converged("converge/mnist-fpt-fast16k-dropout0-seed0", "MNIST", "the headline recipe", bold=True),
    Converged("converge/mnist-fpt-fast16k-dropout0-seed1", "MNIST", "the same, seed 1", bold=True),
    Converged("converge/mnist-fpt-fast16k-dropout0-seed2", "MNIST", "the same, seed 2", bold=True),
    Converged(
        "headline/mnist-fpt-fast16k-val5k-seed0",
        "MNIST",
        "clean protocol: the headline recipe, a budget fixed in advance, test scored once",
        bold=True,
    ),
    Converged("headline/mnist-fpt-fast16k-val5k-seed1", "MNIST", "clean protocol: the same, seed 1", bold=True),
    Converged("headline/mnist-fpt-fast16k-val5k-seed2", "MNIST", "clean protocol: the same, seed 2", bold=True),
    Converged("converge/mnist-fpt-fast-seed0", "MNIST"),
    Converged("converge/mnist-fpt-fast4k-seed0", "MNIST"),
    Converged("converge/mnist-fpt-fast16k-seed0", "MNIST"),
    Converged("converge/mnist-random-paper-seed0", "MNIST"),
    Converged("converge/mnist-random-fast-seed0", "MNIST"),
    Converged(
        "converge/mnist-random-fast16k-dropout0-seed0",
        "MNIST",
        "the random-init twin of the headline recipe's seed 0",
        bold=True,
    ),
    Converged("converge/fashion-mnist-fpt-fast-dropout0-seed0", "Fashion-MNIST", bold=True),
    Converged("converge/fashion-mnist-fpt-fast16k-dropout0-seed0", "Fashion-MNIST", bold=True),
    Converged("converge/fashion-mnist-random-fast-dropout0-seed0", "Fashion-MNIST"),
    Converged(
        "converge/fashion-mnist-random-fast16k-dropout0-seed0",
        "Fashion-MNIST",
        "the random-init twin of the row two above",
    ),
    Converged(
        "converge/fashion-mnist-fpt-fast16k-dropout0-val5k-seed0",
        "Fashion-MNIST",
        "the control for the two rows below",
        bold=True,
    ),
    Converged(
        "converge/fashion-mnist-fpt-fast16k-dropout0-val5k-seed1", "Fashion-MNIST", "the control on seed 1", bold=True
    ),
    Converged("converge/fashion-mnist-fpt-fast16k-dropout0-augment-val5k-seed0", "Fashion-MNIST"),
    Converged("converge/fashion-mnist-fpt-fast16k-dropout0-mean-val5k-seed0", "Fashion-MNIST"),
    Converged("converge/fashion-mnist-fpt-fast-seed0", "Fashion-MNIST"),
    Converged("converge/fashion-mnist-random-fast-seed0", "Fashion-MNIST"),
    Converged("converge/bit-memory-full-random-seed0", "Bit Memory", "makes the Bit backbone"),
    Converged("converge/mnist-bit-fast4k-seed0", "MNIST", "frozen on the Bit backbone of the row above"),
    Converged("converge/bit-memory-fpt-fast-seed0", "Bit Memory", bold=True),
    Converged("converge/bit-memory-fpt-fast-eval100-seed0", "Bit Memory", "the row above again, scored more often"),
    Converged("converge/bit-memory-fpt-fast-dropout0-eval100-seed0", "Bit Memory", bold=True),
    Converged("converge/bit-memory-fpt-fast-dropout0-eval100-seed1", "Bit Memory", "the same, seed 1", bold=True),
    Converged("converge/bit-memory-fpt-fast-dropout0-eval100-seed2", "Bit Memory", "the same, seed 2", bold=True),
    Converged("converge/bit-memory-fpt-paper-seed0", "Bit Memory", bold=True),
    Converged(
        "headline/bit-memory-fpt-fast1k-seed0",
        "Bit Memory",
        "clean protocol (a budget fixed in advance, test scored once): the cosine over 1,000 steps",
    ),
    Converged(
        "headline/bit-memory-fpt-fast1k-constant-seed0",
        "Bit Memory",
        "clean protocol: the headline cell, a constant rate for 1,000 steps, chosen on held-out curves",
        bold=True,
    ),
    Converged(
        "headline/bit-memory-fpt-fast1k-constant-seed1", "Bit Memory", "clean protocol: the same, seed 1", bold=True
    ),
    Converged(
        "headline/bit-memory-fpt-fast1k-constant-seed2", "Bit Memory", "clean protocol: the same, seed 2", bold=True
    ),
    Converged(
        "converge/listops-fpt-fast-seed0", "ListOps (LRA: brackets kept, up to 2,000 tokens)", bold=True, prior=True
    ),
    Converged(
        "converge/listops-fpt-fast-paper-protocol-seed0",
        "ListOps, the paper's input (brackets stripped, 512 tokens)",
        bold=True,
        prior=True,
    ),
]


def recipe_text(config: dict) -> str:
    """A run's recipe as its config.json records it."""
    schedule = config.get("lr_schedule") or "constant"
    parts = [f"lr {_rate(config['lr'])} {schedule}"]
    if config.get("warmup_steps"):
        parts[0] += f", warm-up {config['warmup_steps']}"
    parts.append(f"batch {config['batch_size']}")
    if config.get("micro_batch_size"):
        parts.append(f"micro-batches of {config['micro_batch_size']}")
    parts.append(f"dropout {config['dropout']:g}")
    options = config.get("task_options") or {}
    if options.get("protocol") and config["task"] == "listops":
        parts.append(f"`--protocol {options['protocol']}`")
    if config.get("bucket_window"):
        parts.append(f"bucket window {config['bucket_window']}")
    if config.get("policy", "fpt") != "fpt":
        parts.append(
            f"every weight trained (`--policy {config['policy']}`)"
            if config["policy"] == "full"
            else f"`--policy {config['policy']}`"
        )
    if config.get("pooling", "last") != "last":
        parts.append(f"`--pooling {config['pooling']}`")
    if options.get("augment"):
        parts.append("`--augment`")
    if options.get("val_size"):
        parts.append(f"{options['val_size']:,} training images held out as val")
    parts.append(f"scored every {config['eval_every']:,} steps")
    name = f"{config['recipe']}: " if config.get("recipe") else ""
    return name + ", ".join(parts)


def paper_figure(config: dict) -> str:
    """The paper's figure for a run like this one (GPT-2, Tables 1-2), or '-' where it has none."""
    table, variant = (
        ("table1", "full")
        if config.get("policy") == "full"
        else ("table2", {"pretrained": "fpt", "random": "random", "bit": "bit"}.get(config["init"], ""))
    )
    figure = PAPER[table].get(variant, {}).get(config["task"])
    return "-" if figure is None else "100" if figure == 100 else f"{figure:.1f}"


def ours_text(run: Path, row: Converged, summary: dict, records: list[dict]) -> str:
    final = summary["final"]
    strong = (lambda text: f"**{text}**") if row.bold else (lambda text: text)
    split = {"heldout": "held-out"}.get(final["split"], final["split"])
    prior = f", majority label {100 * final['majority_share']:.1f}" if row.prior else ""
    evaluation = run / "evaluation.json"
    # the test split scored once at the end: by `fpt evaluate` (evaluation.json), or by the run itself
    # where its task has a test set beside the one it watched (summary.json's "test")
    test = _json(evaluation)["splits"].get("test") if evaluation.exists() else (summary.get("test") or {}).get("test")
    if test is not None and final["split"] != "test":
        text = (
            f"{_pct(final['accuracy'])} on {split} ({final['examples']:,}{prior}); "
            f"{strong(_pct(test['accuracy']))} on test ({test['examples']:,}), scored once at the end"
        )
    else:
        text = f"{strong(_pct(final['accuracy']))} on {split} ({final['examples']:,}{prior})"
    before = [r for r in whole_split(records) if r["step"] < summary["step"] and r["split"] == final["split"]]
    if summary.get("status") == "target_reached" and before:
        text += f"; {_pct(before[-1]['accuracy'])} at step {before[-1]['step']:,}"
    return text


def steps_text(summary: dict, config: dict, records: list[dict]) -> str:
    step, budget = summary["step"], config["steps"]
    if summary.get("status") != "target_reached" or step >= budget:
        return f"{step:,}"
    text = f"{step:,} of {budget:,}: stopped at its target {100 * summary['target_accuracy']:g}"
    subset = [r for r in records if r["step"] == step and is_subset(r)]
    if subset:
        text += f" ({subset[-1]['split']} read {_pct(subset[-1]['accuracy'])}, then the whole split)"
    return text


def sittings_text(run: Path, summary: dict) -> str:
    sittings = _jsonl(run / "sittings.jsonl")
    if not sittings:
        resumed = summary.get("resumed_from_step")
        return "not logged" + (f" (summary.json: last resumed at step {resumed:,})" if resumed else "")
    minutes = " + ".join(
        "time not recorded" if s.get("wall_s") is None else f"{round(s['wall_s'] / 60)}" for s in sittings
    )
    text = f"{_count(len(sittings))} ({minutes} min)"
    if sittings[0]["from_step"]:
        text += f", logged from step {sittings[0]['from_step']:,}"
    resumed = [s["from_step"] for s in sittings[1:]]
    if resumed:
        text += ": resumed at " + ", ".join(f"{step:,}" for step in resumed)
    return text


def converged_table() -> str:
    rows = []
    for row in CONVERGED:
        run = RESULTS / row.run
        config, summary = _json(run / "config.json"), _json(run / "summary.json")
        records = _jsonl(run / "metrics.jsonl")
        recipe = recipe_text(config) + (f"; {row.note}" if row.note else "")
        rows.append(
            [
                row.task,
                INITS.get(config["init"], config["init"]),
                recipe,
                str(config["seed"]),
                config.get("precision") or "fp32",
                paper_figure(config),
                ours_text(run, row, summary, records),
                steps_text(summary, config, records),
                sittings_text(run, summary),
            ]
        )
    return _markdown(
        [
            "task",
            "init",
            "recipe (the run's config.json)",
            "seed",
            "precision",
            "paper",
            "ours: final accuracy on the whole split (examples)",
            "steps",
            "sittings (minutes each)",
        ],
        rows,
    )


# --- the two recipes to the same accuracy ------------------------------------------------------------

# (task, init, the paper-recipe run, the fast-recipe run): each compared at the lower of the two runs'
# best whole-split evaluations, the accuracy both reached.
RECIPES = [
    ("MNIST", "pretrained", "mnist-fpt-paper-seed0", "mnist-fpt-fast-seed0"),
    ("MNIST", "pretrained", "mnist-fpt-paper-seed0", "mnist-fpt-fast4k-seed0"),
    ("MNIST", "pretrained", "mnist-fpt-paper-seed0", "mnist-fpt-fast16k-dropout0-seed0"),
    ("MNIST", "random", "mnist-random-paper-seed0", "mnist-random-fast-seed0"),
    ("MNIST", "random", "mnist-random-paper-seed0", "mnist-random-fast16k-dropout0-seed0"),
    ("Bit Memory", "pretrained", "bit-memory-fpt-paper-seed0", "bit-memory-fpt-fast-dropout0-eval100-seed0"),
    ("Bit Memory", "pretrained", "bit-memory-fpt-paper-seed0", "bit-memory-fpt-fast-eval100-seed0"),
    ("Bit Memory", "pretrained", "bit-memory-fpt-paper-seed0", "bit-memory-fpt-fast-seed0"),
]


def _step_time_ms(config: dict) -> float:
    """The idle-machine median step time benchmarks/recipe_speed.py measured for a run's recipe and dropout."""
    timing = _json(RESULTS / "recipe_speed.json")[config["task"]]
    recipe = config.get("recipe") or "paper"
    return next(
        r["ms_per_step"]
        for r in timing["rows"]
        if r["recipe"] == recipe and r["dropout"] == config["dropout"] and r["threads"] == 1
    )


def recipes_table() -> str:
    lines = []
    for task, init, paper_run, fast_run in RECIPES:
        runs = {}
        for name in (paper_run, fast_run):
            folder = RESULTS / "converge" / name
            records = _jsonl(folder / "metrics.jsonl")
            whole = [r for r in whole_split(records) if r["split"] == _json(folder / "summary.json")["final"]["split"]]
            runs[name] = (_json(folder / "config.json"), records, whole)
        target = min(max(r["accuracy"] for r in runs[name][2]) for name in (paper_run, fast_run))
        first = {name: next(r for r in runs[name][2] if r["accuracy"] >= target) for name in runs}
        config, records, whole = runs[fast_run]
        subsets = any(is_subset(r) for r in records if r["step"] < first[fast_run]["step"])
        notes = [
            f"dropout {config['dropout']:g}",
            "its only whole-split evaluation" if len(whole) == 1 else f"scored every {config['eval_every']:,} steps",
        ]
        minutes = {name: first[name]["step"] * _step_time_ms(runs[name][0]) / 60000 for name in runs}
        lines.append(
            [
                task,
                init,
                _pct(target),
                f"{first[paper_run]['step']:,}",
                f"{first[fast_run]['step']:,} ({'; '.join(notes)})",
                f"{minutes[paper_run]:.0f} / {minutes[fast_run]:.0f} min",
                ("≥ " if subsets else "") + f"{minutes[paper_run] / minutes[fast_run]:.1f}x",
            ]
        )
    return _markdown(
        [
            "task",
            "init",
            "accuracy both reached",
            "paper recipe: first at step",
            "fast recipe: first at step",
            "idle-machine training time (steps x median step): paper / fast",
            "ratio",
        ],
        lines,
    )


# --- Table 6 -----------------------------------------------------------------------------------


def _paper_steps(value: float) -> str:
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def table6_xor() -> str:
    """Table 6 on Bit XOR from the committed sweep (benchmarks/results/table6_xor/)."""
    folder = RESULTS / "table6_xor"
    with open(folder / "results.csv", newline="") as handle:
        rows = [dict(r, run_dir=str(ROOT / r["run_dir"])) for r in csv.DictReader(handle)]
    _, labels, cells = steps_data(rows)
    lines = []
    for label in labels:
        cell = cells[(label, "bit-xor")]
        lines.append([label, cell.text, _paper_steps(PAPER_STEPS[label]["bit-xor"])])
    fpt, random = cells[("fpt", "bit-xor")].steps, cells[("random", "bit-xor")].steps
    speedup = (
        f"{statistics.median(random) / statistics.median(fpt):.1f}x"
        if fpt and random
        else "not defined: "
        + " and ".join(v for v, s in (("fpt", fpt), ("random", random)) if not s)
        + " not converged"
    )
    paper = PAPER_STEPS["random"]["bit-xor"] / PAPER_STEPS["fpt"]["bit-xor"]
    lines.append(["speedup random/fpt", speedup, f"{paper:g}x"])
    notes = []
    for label in labels:
        runs = sorted((r for r in rows if r["variant"] == label), key=lambda r: int(r["seed"]))
        found = [run_convergence(r["run_dir"]) for r in runs]
        each = ", ".join(
            f"seed {r['seed']}: " + (f"step {c.step} ({100 * c.accuracy:.1f}%)" if c.converged else c.why_not)
            for r, c in zip(runs, found)
        )
        notes.append(f"{label}: {each}")
        unchecked = [
            convergence(
                [
                    (int(m["step"]), float(m["accuracy"]))
                    for m in whole_split(_jsonl(Path(r["run_dir"]) / "metrics.jsonl"))
                ]
            )
            for r in runs
        ]
        if any(c.converged for c in unchecked) and not any(c.converged for c in found):
            notes.append(
                f"{label} without the chance check: "
                + ", ".join(
                    f"seed {r['seed']}: " + (f"step {c.step} ({100 * c.accuracy:.1f}%)" if c.converged else c.why_not)
                    for r, c in zip(runs, unchecked)
                )
            )
    return _markdown(["", "XOR", "paper"], lines) + "\n\nPer run: " + "; ".join(notes) + "."


def table6_mnist() -> str:
    """Table 6's definition on the converged MNIST runs of the paper recipe, read from their metrics."""
    runs = [
        ("pretrained, paper recipe", "mnist-fpt-paper-seed0", None, "fpt"),
        ("random init, paper recipe", "mnist-random-paper-seed0", None, "random"),
        ("random init, paper recipe, its first 16,000 steps only", "mnist-random-paper-seed0", 16000, "random"),
    ]
    lines = []
    for label, name, upto, variant in runs:
        records = [
            r
            for r in whole_split(_jsonl(RESULTS / "converge" / name / "metrics.jsonl"))
            if upto is None or r["step"] <= upto
        ]
        history = [(int(r["step"]), float(r["accuracy"])) for r in records]
        chance = (
            (max(r["majority_share"] for r in records), min(int(r["examples"]) for r in records))
            if all(r.get("majority_share") is not None and r.get("examples") for r in records)
            else None
        )
        found = convergence(history, chance=chance)
        best = max(records, key=lambda r: r["accuracy"])
        text = (
            f"step {found.step:,}, to {100 * found.accuracy:.2f}"
            if found.converged
            else f"not converged within {found.budget:,} steps ({found.why_not})"
        )
        lines.append(
            [
                label,
                f"{found.budget:,}",
                text,
                f"{_pct(best['accuracy'])} (step {best['step']:,})",
                _paper_steps(PAPER_STEPS[variant]["mnist"]),
            ]
        )
    return _markdown(
        [
            "MNIST run",
            "steps run",
            "converged (Table 6's definition)",
            "best whole-split evaluation",
            "paper: converged at",
        ],
        lines,
    )


# --- speed and memory --------------------------------------------------------------------------

SPEED_CONFIGS = {
    "minilm-bit-memory": "MiniLM, Bit Memory shape",
    "minilm-mnist": "MiniLM, MNIST shape",
    "gpt2-mnist": "GPT-2-small architecture, MNIST shape",
    "smollm2-mnist": "SmolLM2-135M, MNIST shape",
    "gpt2-xl-scale": "GPT-2-XL architecture (1.5B parameters)",
}
SPEED_VARIANTS = {
    "peer": "plain PyTorch loop",
    "fpt": "fpt",
    "fpt+bf16": "fpt `--precision bf16`",
    "fpt+compile": "fpt `--compile`",
    "fpt+ckpt": "fpt `--checkpointing`",
    "fpt+bf16+ckpt": "fpt `--precision bf16 --checkpointing`",
}


def _diff(value: float) -> str:
    return "0" if value == 0 else f"{value:.1e}".replace("e-0", "e-")


def speed_table() -> str:
    """benchmarks/perf.py's results: one statistic, the median step time, and ratios of those medians."""
    perf = _json(RESULTS / "perf.json")
    peak, peak_bf16 = perf["machine"]["fp32_matmul_peak_flops"], perf["machine"]["bf16_matmul_peak_flops"]
    rows = [r for r in perf["rows"] if "error" not in r]
    peers = {r["config"]: r for r in rows if r["variant"] == "peer"}
    lines = []
    for r in rows:
        peer = peers.get(r["config"])
        # FLOPs of one step (perf.py's count per token x tokens), over the median step
        flops = r["train_flops_per_s"] / r["train_tokens_per_s"] * r["tokens_per_step"] / r["step_s_median"]
        mfu = f"{flops / peak_bf16:.0%} of the bf16 peak" if "bf16" in r["variant"] else f"{flops / peak:.0%}"
        shape = f"{r['tokens_per_step'] / r['batch']:.0f} tokens x {r['batch']}"
        ratio = "-" if peer is None else f"{peer['step_s_median'] / r['step_s_median']:.2f}x"
        diff = "-" if peer is None else _diff(max(abs(a - b) for a, b in zip(r["losses"], peer["losses"])))
        lines.append(
            [
                f"{SPEED_CONFIGS.get(r['config'], r['config'])} ({shape})",
                SPEED_VARIANTS.get(r["variant"], r["variant"]),
                f"{1000 * r['step_s_median']:.0f} ms",
                ratio,
                mfu,
                f"{r['train_peak_rss_mib'] / 1024:.1f}",
                diff,
            ]
        )
    return _markdown(
        [
            "configuration",
            "variant",
            "median step",
            "speed-up: plain loop's median / this median",
            "MFU at the median step (of the fp32 peak unless said)",
            "peak memory in training, GiB",
            f"largest loss difference from the plain loop ({rows[0]['steps']} steps)",
        ],
        lines,
    )


LISTOPS_VARIANTS = {
    "peer-pad2000": "plain loop, every sequence padded to 2000",
    "fpt": "fpt, each batch cut to its longest sequence",
    "fpt+bucket": "fpt `--bucket-window 8` (similar lengths batched together)",
}


def speed_listops_table() -> str:
    """perf.py --only listops: the mean step (lengths vary from batch to batch, so a mean is the throughput)."""
    perf = _json(RESULTS / "perf_listops.json")
    rows = [r for r in perf["rows"] if "error" not in r]
    peer = next(r for r in rows if r["variant"].startswith("peer"))
    mean = {r["variant"]: r["batch"] / r["train_examples_per_s"] for r in rows}
    lines = [
        [
            LISTOPS_VARIANTS.get(r["variant"], r["variant"]),
            f"{mean[r['variant']]:.1f} s",
            f"{r['train_examples_per_s']:.2f}",
            f"{mean[peer['variant']] / mean[r['variant']]:.2f}x",
            f"{r['train_peak_rss_mib'] / 1024:.1f}",
        ]
        for r in rows
    ]
    return _markdown(
        [
            "variant",
            f"mean step ({rows[0]['steps']} steps)",
            "examples/s",
            "speed-up: padded mean step / this mean step",
            "peak memory, GiB",
        ],
        lines,
    )


def compile_table() -> str:
    """compile_speed.py's table, from the rows of its JSON (the script formats it; loaded by path, as
    benchmarks/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("compile_speed", Path(__file__).parent / "compile_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.table(module.summarise(_json(RESULTS / "compile" / "compile_speed.json")["rows"]))


MEMORY_ORDER = [
    "bit-xor",
    "bit-memory",
    "mnist",
    "fashion-mnist",
    "cifar10",
    "ucr",
    "cifar10-lra",
    "remote-homology",
    "listops",
]


def memory_table() -> str:
    memory = _json(RESULTS / "memory.json")
    rows = sorted(memory["rows"], key=lambda r: MEMORY_ORDER.index(r["task"]) if r["task"] in MEMORY_ORDER else 99)
    lines = [
        [
            r["task"] + (" (GunPoint)" if r["task"] == "ucr" else ""),
            str(r["tokens"]),
            "on (auto)" if r["checkpointing"] else "off",
            str(r["micro_batch"]) if r["micro_batch"] else "- (not split)",
            f"{r['peak_gb']:.2f}",
        ]
        for r in rows
    ]
    return _markdown(["task", "tokens", "checkpointing", "micro-batch", "peak GiB"], lines)


# --- early-training budgets --------------------------------------------------------------------


def listops_budget_table() -> str:
    run = RESULTS / "budget_listops_300"
    config, evaluation = _json(run / "config.json"), _json(run / "evaluation.json")
    val = [r for r in whole_split(_jsonl(run / "metrics.jsonl")) if r["split"] == "val"][-1]
    test = evaluation["splits"]["test"]
    return _markdown(
        ["steps (examples)", "val", "test", "time to the end of the val pass at the last step"],
        [
            [
                f"{val['step']:,} ({val['step'] * config['batch_size']:,})",
                f"{100 * val['accuracy']:.1f}%",
                f"{100 * test['accuracy']:.1f}%",
                f"{val['elapsed_s']:.1f} s ({val['elapsed_s'] / 60:.1f} min)",
            ]
        ],
    )


def bit_memory_budget_table() -> str:
    records = whole_split(_jsonl(RESULTS / "bit_memory_pretrained_seed0" / "metrics.jsonl"))
    return _markdown(
        ["step"] + [f"{r['step']}" for r in records],
        [
            ["held-out bit accuracy"] + [f"{100 * r['accuracy']:.1f}%" for r in records],
            ["time since the start (evaluations included)"] + [f"{r['elapsed_s'] / 60:.1f} min" for r in records],
        ],
    )


def mnist_budget_table() -> str:
    lines = []
    for label, name in (("pretrained", "budget_mnist_2000"), ("random (`--init random`)", "budget_mnist_random_1000")):
        records = {r["step"]: r for r in whole_split(_jsonl(RESULTS / name / "metrics.jsonl")) if r["split"] == "test"}
        cells = [f"{100 * records[step]['accuracy']:.1f}%" if step in records else "not run" for step in (1000, 2000)]
        last = records[max(records)]
        lines.append([label] + cells + [f"{last['elapsed_s'] / 60:.1f} min to step {last['step']:,}"])
    return _markdown(
        ["init", "step 1000 (about 1/2 epoch)", "step 2000 (about 1 epoch)", "time, test evaluations included"], lines
    )


def bit_xor_budget_table() -> str:
    result = _json(RESULTS / "bit_xor.json")
    rows = sorted(result["rows"], key=lambda r: r["seed"])
    pretrained = [r for r in rows if r["init"] == "pretrained"]
    random = [r for r in rows if r["init"] == "random"]
    steps = sorted(r["steps"] for r in random)
    return _markdown(
        ["init"] + [f"seed {r['seed']}" for r in pretrained],
        [
            ["pretrained: step 99% reached, training wall time"]
            + [
                f"{r['reached_at']} steps, {r['train_s']:.1f} s"
                if r["reached_at"]
                else f"not reached in {r['steps']} steps"
                for r in pretrained
            ],
            [f"random: held-out accuracy after {result['budget_s']:.0f} s ({steps[0]}-{steps[-1]} steps)"]
            + [f"{100 * r['accuracy']:.1f}%" for r in random],
        ],
    )


def data_parallel_table() -> str:
    scale = _json(RESULTS / "scale.json")
    one, two = scale["one_process"], scale["2_ranks"]
    return _markdown(
        ["", "step", "examples/s"],
        [
            [
                f"one process, {one['threads']} threads",
                f"{1000 * one['step_s']:.1f} ms",
                f"{one['examples_per_s']:.0f}",
            ],
            [
                f"2 ranks (gloo), {two['threads_each']} thread each",
                f"{1000 * two['step_s']:.1f} ms",
                f"{two['examples_per_s']:.0f}",
            ],
        ],
    )


# --- the paper's tables at short budgets (sweeps' results.csv) ------------------------------------


def _sweep_scores(folder: str, variant: str, task: str) -> tuple[list[float], str]:
    """A sweep's finished scores (percent, by seed) for one variant and task, and the status of the rest."""
    with open(RESULTS / folder / "results.csv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["variant"] == variant and r["task"] == task]
    done = sorted((r for r in rows if r["status"] == "done"), key=lambda r: int(r["seed"]))
    return [100 * float(r["accuracy"]) for r in done], (rows[0]["status"] if rows and not done else "")


def _paper_text(table: str | None, variant: str, task: str) -> str:
    value = PAPER.get(table, {}).get(variant, {}).get(task) if table else None
    if value is None:
        return ""
    return f" (paper {value if isinstance(value, int) else f'{value:.1f}'})"


def _score_cell(folder: str | None, variant: str, task: str, paper: str | None, seeds: bool = False) -> str:
    if folder is None:
        return ""
    scores, status = _sweep_scores(folder, variant, task)
    if not scores:
        return ("skipped for time" if status == "skipped" else f"not run ({status or 'no runs'})") + _paper_text(
            paper, variant, task
        )
    text = f"{statistics.mean(scores):.1f} ± {statistics.stdev(scores):.1f}" if len(scores) > 1 else f"{scores[0]:.1f}"
    if seeds:
        text += " (" + ", ".join(f"{s:.1f}" for s in scores) + ")"
    return text + _paper_text(paper, variant, task)


# (row label, variant, the paper's table for it, folder per column (None: not run for that column), remark)
XOR_ROWS = [
    ("fpt", "fpt", "table1", "tables", "converged: Table 6 below"),
    (
        "finetune (lr 1e-3): every pretrained weight trained; run as `full` before `full` meant the paper's Full",
        "full",
        None,
        "tables",
        "chance: at lr 1e-3 Adam wrecked the pretrained weights, hence `finetune`'s smaller lr now",
    ),
    (
        "full (the paper's Full: from scratch, every weight trained)",
        "full",
        "table1",
        "full_v2/xor",
        "chance within 600 steps at lr 1e-3, like random frozen weights (`benchmarks/results/full_v2/xor/`); at 3e-4, "
        "chosen on val, it learned XOR in 100 steps on one seed of three (Controls)",
    ),
    (
        "finetune (lr 1e-4, the new default; the paper has no such row)",
        "finetune",
        None,
        "full_v2/xor",
        "a gentle fine-tune keeps what pretraining gave (`benchmarks/results/full_v2/xor/`)",
    ),
    (
        "lstm (3 x 768, all trained)",
        "lstm",
        "table1",
        "tables",
        "solved; we suspect the paper's 50% is its code's LSTM whose recurrent weights were silently frozen",
    ),
    (
        "random (same architecture, FPT freezing)",
        "random",
        "table2",
        "tables",
        "chance within 600 steps; the paper's random needs ~2e4 steps (Table 6)",
    ),
    ("lstm-frozen (Table 3)", "lstm-frozen", "table3", "tables", "as the paper"),
    ("lstm*-frozen (Table 3)", "lstm*-frozen", "table3", "tables", "as the paper"),
    ("output only (Table 18)", "output-only", "table18", "tables", ""),
    ("output + input", "output+input", "table18", "tables", ""),
    ("output + positions", "output+position", "table18", "tables", "positions alone suffice with MiniLM"),
    (
        "output + layer norms",
        "output+layernorm",
        "table18",
        "tables",
        "the paper's strongest single group is weak here",
    ),
]


def paper_tables_xor() -> str:
    lines = [
        [
            label,
            _score_cell(folder, variant, "bit-xor", paper, seeds=folder == "full_v2/xor" and variant == "full"),
            remark,
        ]
        for label, variant, paper, folder, remark in XOR_ROWS
    ]
    return _markdown(["variant", "XOR", "what it shows"], lines)


IMAGE_COLUMNS = [
    ("mnist", "tables_mnist", "tables_mnist_v2"),
    ("fashion-mnist", "tables_fashion_mnist", "tables_fashion_mnist_v2"),
    ("bit-memory", "tables_bit_memory", "tables_bit_memory_v2"),
]
# (row label, variant, the paper's table, which sweep: the first run or the v2 rerun, only these tasks)
IMAGE_ROWS = [
    ("fpt", "fpt", "table1", 0, None),
    ("finetune (lr 1e-3), run as `full` before it meant the paper's Full", "full", None, 0, None),
    ("full (the paper's Full: from scratch, every weight trained)", "full", "table1", 1, None),
    ("finetune (lr 1e-4: every pretrained weight trained)", "finetune", None, 1, None),
    ("lstm (3 x 768, all trained)", "lstm", "table1", 0, None),
    ("random (FPT freezing)", "random", "table2", 0, None),
    ("lstm-frozen (Table 3)", "lstm-frozen", "table3", 0, None),
    ("lstm*-frozen (Table 3)", "lstm*-frozen", "table3", 0, None),
    ("output only (Table 18)", "output-only", "table18", 0, ("mnist",)),
    ("output + input", "output+input", "table18", 0, ("mnist",)),
    ("output + positions", "output+position", "table18", 0, ("mnist",)),
    ("output + layer norms", "output+layernorm", "table18", 0, ("mnist",)),
]


def paper_tables_images() -> str:
    lines = []
    for label, variant, paper, rerun, only in IMAGE_ROWS:
        cells = [
            _score_cell(folders[rerun] if only is None or task in only else None, variant, task, paper)
            for task, *folders in IMAGE_COLUMNS
        ]
        lines.append([label] + cells)
    return _markdown(["variant", "MNIST", "Fashion-MNIST", "Bit Memory"], lines)


# --- how the fast recipe was chosen (validation splits) ---------------------------------------------

RECIPE_SEARCH = [
    ("paper recipe (1e-3 constant, batch 16, fp32)", "paper-lr1e-3-b16"),
    ("fast recipe (3e-3, warm-up 100, cosine, batch 32, bf16; dropout 0.1 then)", "fast-lr3e-3-cos-b32-bf16"),
]
RECIPE_SEARCH_STEPS = (250, 750, 1250, 1750, 2250, 3000)


def recipe_search_table() -> str:
    lines = []
    for label, name in RECIPE_SEARCH:
        records = {r["step"]: r for r in whole_split(_jsonl(RESULTS / "recipe_search" / name / "metrics.jsonl"))}
        lines.append([label] + [f"{100 * records[step]['accuracy']:.1f}" for step in RECIPE_SEARCH_STEPS])
    return _markdown(
        ["val accuracy at step (the whole 5,000-image val split)"] + [f"{s:,}" for s in RECIPE_SEARCH_STEPS], lines
    )


def lr_probe_table() -> str:
    folder = RESULTS / "recipe_probe" / "fashion_lr" / "runs"
    runs = sorted(folder.iterdir(), key=lambda run: _json(run / "config.json")["lr"])
    lines, steps = [], None
    for run in runs:
        config, records = _json(run / "config.json"), _jsonl(run / "metrics.jsonl")
        steps = [(r["step"], r["split"]) for r in records]
        test = _json(run / "evaluation.json")["splits"]["test"]
        label = f"lr {_rate(config['lr'])}" + (" (the recipe's)" if config["lr"] == 3e-3 else "")
        lines.append([label] + [_pct(r["accuracy"]) for r in records] + [_pct(test["accuracy"])])
    return _markdown(
        ["val accuracy at step"] + [f"{step:,} ({split})" for step, split in steps] + ["test, scored once at the end"],
        lines,
    )


DROPOUT_PROBE = [
    ("Fashion-MNIST", "fashion", {"dropout": "0.1", "pooling": "last"}),
    ("Fashion-MNIST", "fashion", {"dropout": "0.1", "pooling": "mean"}),
    ("Fashion-MNIST", "fashion", {"dropout": "0.0", "pooling": "last"}),
    ("Fashion-MNIST", "fashion", {"dropout": "0.0", "pooling": "mean"}),
    ("MNIST", "mnist", {"dropout": "0.1"}),
    ("MNIST", "mnist", {"dropout": "0.0"}),
]


def dropout_probe_table() -> str:
    lines = []
    for task, folder, values in DROPOUT_PROBE:
        with open(RESULTS / "recipe_probe" / folder / "results.csv", newline="") as handle:
            row = next(r for r in csv.DictReader(handle) if all(r[k] == v for k, v in values.items()))
        pooling = {"last": "last token", "mean": "mean of tokens"}[values.get("pooling", "last")]
        lines.append(
            [
                f"{task}, dropout {float(values['dropout']):g}, {pooling}",
                _pct(float(row["eval_accuracy"])),
                _pct(float(row["accuracy"])),
            ]
        )
    return _markdown(
        ["fast recipe, 2,000 steps", "val at step 2,000 (all 5,000)", "test, scored once at the end"], lines
    )


HORIZONS = (96, 192, 336, 720)
HEADLINE = RESULTS / "headline"
# DLinear's runs per ETT file: ETTh2's recipe was chosen on ETTh2's own validation months
# (forecasting/linear_etth2/selection.md); ETTh1's recipe's ETTh2 runs stay in forecasting/linear/
LINEAR_RUNS = {"ETTh2": "linear_etth2"}


def _linear_pattern(dataset: str) -> str:
    """DLinear's run folders for one ETT file, {h} the horizon (seeds: `-seed*` after it)."""
    return f"forecasting/{LINEAR_RUNS.get(dataset, 'linear')}/{dataset}-h{{h}}"


def _fpt_forecast_pattern(dataset: str) -> str:
    """The headline forecasts' run folders for one ETT file, {h} the horizon (seeds: `-seed*` after it)."""
    return f"headline/{dataset.lower()}-{{h}}-fpt-fast1500"


def _horizon_runs(pattern: str) -> list[list[Path]]:
    """The run folders of each of HORIZONS under a folder pattern with {h}, its seeds `pattern-seed*`."""
    return [sorted(RESULTS.glob(f"{pattern.format(h=h)}-seed*")) for h in HORIZONS]


def _forecast_cell(summaries: list[dict]) -> str:
    """Test MSE / MAE of finished runs (mean, and the spread where there are several seeds)."""
    tests = _tests(summaries)
    if not tests:
        return "-"
    mse, mae = [t["mse"] for t in tests], [t["mae"] for t in tests]
    if len(tests) == 1:
        return f"{mse[0]:.3f} / {mae[0]:.3f}"
    return f"{statistics.mean(mse):.3f} ± {statistics.stdev(mse):.3f} / {statistics.mean(mae):.3f} (n={len(tests)})"


def _finished(runs: list[Path]) -> list[dict]:
    return [_json(run / "summary.json") for run in runs if (run / "summary.json").exists()]


def _average_cell(per_horizon: list[list[dict]]) -> str:
    """The four-horizon average of test MSE / MAE (each horizon's seeds averaged first), or "-"
    until every horizon has a finished run: an average over some horizons is not the published one."""
    if not all(_tests(runs) for runs in per_horizon):
        return "-"
    means = [[statistics.mean(t[key] for t in _tests(runs)) for key in ("mse", "mae")] for runs in per_horizon]
    return f"{statistics.mean(m[0] for m in means):.3f} / {statistics.mean(m[1] for m in means):.3f}"


def _tests(summaries: list[dict]) -> list[dict]:
    return [s["test"]["test"] for s in summaries if s.get("test")]


def _dataset_forecasts(dataset: str) -> str:
    """One ETT file's table: ours and the published figures per horizon and their average."""
    from fpt.experiments.paper import PUBLISHED_FORECASTS

    naive = {
        row["horizon"]: row
        for row in _json(RESULTS / "forecasting" / "naive.json")["rows"]
        if row["dataset"] == dataset
    }
    linear = [_finished(runs) for runs in _horizon_runs(_linear_pattern(dataset))]
    kept_best = [_finished(runs) for runs in _horizon_runs(f"forecasting/linear_best/{dataset}-h{{h}}")]
    fpt_runs = [_finished(runs) for runs in _horizon_runs(_fpt_forecast_pattern(dataset))]

    def published(variant: str) -> list[str]:
        figures = [PUBLISHED_FORECASTS.get((f"ett:{dataset}", key), {}).get(variant) for key in (*HORIZONS, "avg")]
        return ["-" if figure is None else f"{figure[1]:.3f} / {figure[2]:.3f}" for figure in figures]

    naive_cells = [f"{naive[h]['test_mse']:.3f} / {naive[h]['test_mae']:.3f}" for h in HORIZONS]
    naive_average = [statistics.mean(naive[h][f"test_{key}"] for h in HORIZONS) for key in ("mse", "mae")]
    rows = [
        ["last value (naive)", *naive_cells, f"{naive_average[0]:.3f} / {naive_average[1]:.3f}"],
        ["DLinear (`--model linear`), ours", *map(_forecast_cell, linear), _average_cell(linear)],
        ["DLinear, `--keep-best --patience 3`, ours", *map(_forecast_cell, kept_best), _average_cell(kept_best)],
        ["DLinear, published", *published("linear")],
        ["fpt, frozen MiniLM, ours", *map(_forecast_cell, fpt_runs), _average_cell(fpt_runs)],
        ["One Fits All GPT2(6), published", *published("fpt")],
        ["PatchTST, published", *published("PatchTST")],
    ]
    return _markdown([f"{dataset}, test MSE / MAE"] + [f"H={h}" for h in HORIZONS] + ["average"], rows)


def forecasting_table() -> str:
    """ETTh1 and ETTh2, look-back 336: test MSE / MAE of our runs (every test window, scored once at
    each run's end) beside the published figures (fpt.experiments.paper.PUBLISHED_FORECASTS; the
    averages are One Fits All's Table 3, the DLinear per-horizon figures the DLinear paper's)."""
    return _dataset_forecasts("ETTh1") + "\n\n" + _dataset_forecasts("ETTh2")


def uea_table() -> str:
    """UEA sets bundled with sktime: test accuracy, scored once at each run's end, with the
    validation accuracy the run was watched on (benchmarks/results/headline/). A run that watched
    the test split itself (One Fits All's protocol, `...-test-watched-...`) says so: its test column
    is the last evaluation, then the best of all of them, which is the figure that protocol reports."""
    from fpt.experiments.paper import PUBLISHED_UEA

    rows = []
    for run in sorted([*HEADLINE.glob("japanese-vowels-*"), *HEADLINE.glob("basic-motions-*")]):
        if not (run / "summary.json").exists():
            continue
        summary, config = _json(run / "summary.json"), _json(run / "config.json")
        options = config["task_options"]
        published = PUBLISHED_UEA.get(f"ucr:{options['dataset']}", {}).get("fpt")
        series = "z-normalised" if options.get("znorm", True) else "raw"
        if summary["final"]["split"] != "test":
            watched = f"{_pct(summary['final']['accuracy'])} ({summary['final']['examples']})"
            test = f"{_pct(summary['test']['test']['accuracy'])} ({summary['test']['test']['examples']})"
        else:  # the test split was the watched one: its last score, and the best of every evaluation of it
            scores = [r for r in _jsonl(run / "metrics.jsonl") if r["split"].startswith("test")]
            best = max(scores, key=lambda r: r["accuracy"])
            series += ", test watched: not clean"
            watched = "-"
            test = (
                f"{_pct(scores[-1]['accuracy'])} ({scores[-1]['examples']}); best of {len(scores)} "
                f"evaluations {_pct(best['accuracy'])} at step {best['step']:,}"
            )
        row = [options["dataset"], series, str(config["seed"]), f"{config['steps']:,}", watched, test]
        rows.append(row + [f"{published[1]} ({published[0]})" if published else "-"])
    header = ["set", "series", "seed", "steps", "val (series)", "test (series)", "published"]
    return _markdown(header, rows)


# (task, reference run name, int8 run name), each with {seed}: the same recipe, budget and seed
INT8_PAIRS = [
    ("Bit Memory", "bit-memory-fpt-fast1k-constant-seed{seed}", "bit-memory-fpt-fast1k-constant-int8-seed{seed}"),
    ("Bit Memory", "bit-memory-fpt-fast1k-constant-seed{seed}", "bit-memory-fpt-fast1k-constant-int8-bf16-seed{seed}"),
    ("MNIST", "mnist-fpt-fast5k-val5k-bf16-seed{seed}", "mnist-fpt-fast5k-val5k-int8-bf16-seed{seed}"),
]


def int8_table() -> str:
    """int8 frozen weights (`--precision int8`, `int8-bf16`) against the same cell in the reference precision
    (benchmarks/headline.sh: bit-memory against bit-memory-int8 and -int8-bf16, mnist-30min against
    mnist-30min-int8-bf16), each seed where both ran to their budget with a test score."""
    rows = []
    for task, reference, quantized in INT8_PAIRS:
        prefix = quantized.removesuffix("{seed}")
        numbers = (run.name.removeprefix(prefix) for run in HEADLINE.glob(prefix + "*"))
        for seed in sorted(int(number) for number in numbers if number.isdigit()):
            runs = [HEADLINE / name.format(seed=seed) for name in (reference, quantized)]
            if not all((run / "summary.json").exists() for run in runs):
                continue
            scores = [_json(run / "summary.json") for run in runs]
            configs = [_json(run / "config.json") for run in runs]
            if not all(s.get("test") for s in scores) or any(s["step"] != c["steps"] for s, c in zip(scores, configs)):
                continue  # not to its budget, or no test score: nothing to pair
            test = [s["test"]["test"]["accuracy"] for s in scores]
            rows.append(
                [
                    task,
                    str(seed),
                    f"{configs[0]['steps']:,}",
                    *(
                        f"`{c['precision']}`, {c['threads']} thread{'s' * (c['threads'] != 1)}: "
                        f"{_pct(s['final']['accuracy'])} / {_pct(s['test']['test']['accuracy'])}"
                        for s, c in zip(scores, configs)
                    ),
                    f"{100 * (test[1] - test[0]):+.2f}",
                ]
            )
    header = [
        "task",
        "seed",
        "steps",
        "reference: held-out / test",
        "int8: held-out / test",
        "int8 - reference, test points",
    ]
    return _markdown(header, rows)


STEP_VARIANTS = {  # benchmarks/int8.py step's variants, in the table's words
    "fp32": "`fp32`",
    "bf16": "`bf16`",
    "int8": "`int8` (int8 storage, fp32 products)",
    "int8-bf16": "`int8-bf16` (int8 storage, bf16 products)",
    "int8-fbgemm": "int8 products (fbgemm; not offered)",
}


def _cpu_words(machine: dict) -> str:
    """'AMD EPYC (AVX512-BF16, VNNI), 2 threads': the CPU and the features the precisions hinge on."""
    flags = set(machine.get("flags", []))
    named = [
        word
        for flag, word in (("avx512_bf16", "AVX512-BF16"), ("amx_bf16", "AMX"), ("avx512_vnni", "VNNI"))
        if flag in flags
    ] or ["no native bf16, no VNNI"]
    return f"{machine['cpu']} ({', '.join(named)}), {machine['threads']} threads"


def int8_step_table() -> str:
    """benchmarks/int8.py step: fpt's whole training step in each precision, wall-clock medians of
    interleaved repeats on an idle machine, one row per (machine, task); each cell the step and its
    speed-up on fp32."""
    rows = []
    for path in sorted((RESULTS / "int8").glob("step_*.json")):
        record = _json(path)
        by_task: dict[str, dict[str, dict]] = {}
        for row in record["rows"]:
            by_task.setdefault(f"{row['task']} (batch {row['batch']})", {})[row["variant"]] = row
        for task, variants in by_task.items():
            cells = [
                f"{row['wall_ms']:.0f} ms ({row['vs_fp32']:.2f}x)" if (row := variants.get(v)) else "-"
                for v in STEP_VARIANTS
            ]
            rows.append([_cpu_words(record["machine"]), task, *cells])
    header = ["machine", "task", *STEP_VARIANTS.values()]
    return _markdown(header, rows)


@dataclass(frozen=True)
class TimeToAccuracy:
    task: str  # the task column's words
    threshold: float  # on the held-out split the run evaluates between steps
    step_task: str  # the `task` of fast_recipe_steps_*.json's rows (benchmarks/int8.py step) at the runs' shape
    runs: tuple[str, ...]  # run directories under benchmarks/results/headline, any precision


# The 30-minute MNIST cell's runs (benchmarks/headline.sh mnist-30min-patch7 SEED), one per seed
MNIST_30_MINUTES = tuple(f"mnist-fpt-fast13k-patch7-val5k-bf16-seed{seed}" for seed in (0, 1, 2))

TIME_TO_ACCURACY = [
    TimeToAccuracy(
        "Bit Memory",
        0.99,
        "bit-memory-fast",
        tuple(f"bit-memory-fpt-fast1k-constant{p}-seed0" for p in ("", "-bf16", "-int8", "-int8-bf16")),
    ),
    TimeToAccuracy(
        "MNIST, 4x4 patches",
        0.98,
        "mnist-shape",
        (
            "mnist-fpt-fast16k-val5k-seed0",
            "mnist-fpt-fast5k-val5k-bf16-seed0",
            "mnist-fpt-fast5k-val5k-int8-bf16-seed0",
        ),
    ),
    TimeToAccuracy(
        "MNIST, 7x7 patches",
        0.98,
        "mnist-7x7-shape",
        MNIST_30_MINUTES,
    ),
]


def _minutes(steps: int, step_ms: float) -> str:
    return f"{steps * step_ms / 60e3:.1f} min"


def first_step_at(records: list[dict], threshold: float) -> int | None:
    """The step of a run's first held-out evaluation at or above `threshold`; a test-split record
    never counts (no choice and no claim here may rest on the test split)."""
    held_out = (r for r in records if "accuracy" in r and not r["split"].startswith("test"))
    return next((r["step"] for r in held_out if r["accuracy"] >= threshold), None)


def time_to_accuracy_table() -> str:
    """Time to accuracy per precision: the step of a headline run's first held-out evaluation at or
    above the task's threshold (its metrics.jsonl), times the median step of that precision and shape
    on two idle cores (benchmarks/int8.py step, fast_recipe_steps_*.json). The runs themselves shared
    the machine, so their own clocks do not compare; the steps a precision needs and the time a step
    takes are each measured, evaluations left out. One row per finished run. (recipes_table composes
    a time the same way, from benchmarks/recipe_speed.py's step medians.)"""
    rows = []
    for path in sorted((RESULTS / "int8").glob("fast_recipe_steps_*.json")):
        record = _json(path)
        step_ms = {(row["task"], row["variant"]): row["wall_ms"] for row in record["rows"]}
        for cell in TIME_TO_ACCURACY:
            for name in cell.runs:
                run = HEADLINE / name
                if not (run / "summary.json").exists():
                    continue
                config, summary = _json(run / "config.json"), _json(run / "summary.json")
                reached = first_step_at(_jsonl(run / "metrics.jsonl"), cell.threshold)
                if (cell.step_task, config["precision"]) not in step_ms:
                    sys.exit(f"{path.name} has no {config['precision']} step for {cell.step_task}: rerun int8.py step")
                ms = step_ms[(cell.step_task, config["precision"])]
                rows.append(
                    [
                        f"{cell.task} ({100 * cell.threshold:.0f}%)",
                        f"`{config['precision']}`",
                        f"{config['seed']}",
                        f"{ms:.0f} ms",
                        f"not in {config['steps']:,}" if reached is None else f"{reached:,}: {_minutes(reached, ms)}",
                        f"{config['steps']:,}: {_minutes(config['steps'], ms)}",
                        f"{_pct(summary['final']['accuracy'])} / {_pct(summary['test']['test']['accuracy'])}",
                        _cpu_words(record["machine"]),
                    ]
                )
    header = [
        "task (held-out threshold)",
        "precision",
        "seed",
        "median step, two idle cores",
        "first held-out evaluation at the threshold: step, time",
        "budget: steps, time",
        "at the budget's end: held-out / test",
        "machine of the step times",
    ]
    return _markdown(header, rows)


# --- the front page's one table: the headline claims, each from its runs ----------------------------


@dataclass(frozen=True)
class Headline:
    task: str  # the task column's words
    model: str  # the model column's words
    runs: tuple[str, ...]  # run directories under benchmarks/results/, one per seed
    horizon: int = 0  # a forecast's horizon: the row reads test MSE / MAE instead of accuracy
    # a forecast averaged over HORIZONS (the published tables' summary) instead of `runs`: a folder
    # pattern with {h} for the horizon, whose seeds are the folders `pattern-seed*`
    average_of: str = ""


HEADLINES = [
    Headline(
        "MNIST",
        "frozen MiniLM, pretrained, fast recipe without dropout (fp32), 16,000 steps fixed in advance, 5,000 "
        "training images held out as val",
        tuple(f"headline/mnist-fpt-fast16k-val5k-seed{seed}" for seed in range(3)),
    ),
    Headline(
        "MNIST",
        "the same in 30 minutes of two cores with native bf16: 7x7 patches (16 tokens), bf16, 13,000 steps fixed "
        "in advance by wall-clock arithmetic",
        tuple(f"headline/{name}" for name in MNIST_30_MINUTES),
    ),
    Headline(
        "MNIST",
        "earlier runs of the same recipe (bf16) without a val split",
        (
            "converge/mnist-fpt-fast16k-dropout0-seed0",
            "converge/mnist-fpt-fast16k-dropout0-seed1",
            "converge/mnist-fpt-fast16k-dropout0-seed2",
        ),
    ),
    Headline("MNIST", "the same with random frozen weights", ("converge/mnist-random-fast16k-dropout0-seed0",)),
    Headline(
        "Fashion-MNIST",
        "frozen MiniLM, pretrained, the same recipe",
        ("converge/fashion-mnist-fpt-fast16k-dropout0-seed0",),
    ),
    Headline(
        "Fashion-MNIST",
        "the same with random frozen weights",
        ("converge/fashion-mnist-random-fast16k-dropout0-seed0",),
    ),
    Headline(
        "Fashion-MNIST",
        "pretrained, 5,000 training images held out as val",
        (
            "converge/fashion-mnist-fpt-fast16k-dropout0-val5k-seed0",
            "converge/fashion-mnist-fpt-fast16k-dropout0-val5k-seed1",
        ),
    ),
    Headline(
        "Bit Memory",
        "frozen MiniLM, pretrained, fast recipe without dropout, stopped at 99",
        (
            "converge/bit-memory-fpt-fast-dropout0-eval100-seed0",
            "converge/bit-memory-fpt-fast-dropout0-eval100-seed1",
            "converge/bit-memory-fpt-fast-dropout0-eval100-seed2",
        ),
    ),
    Headline(
        "Bit Memory",
        "clean protocol: a constant rate for 1,000 steps, chosen on held-out curves",
        (
            "headline/bit-memory-fpt-fast1k-constant-seed0",
            "headline/bit-memory-fpt-fast1k-constant-seed1",
            "headline/bit-memory-fpt-fast1k-constant-seed2",
        ),
    ),
    Headline(
        "ListOps (LRA input)",
        "frozen MiniLM, pretrained, fast recipe, 1,000 steps",
        ("converge/listops-fpt-fast-seed0",),
    ),
    Headline(
        "ETTh1, look-back 336",
        "DLinear (`--model linear`), trained by fpt's loop",
        (
            "forecasting/linear/ETTh1-h96-seed0",
            "forecasting/linear/ETTh1-h96-seed1",
            "forecasting/linear/ETTh1-h96-seed2",
        ),
        horizon=96,
    ),
    Headline(
        "ETTh1, look-back 336",
        "frozen MiniLM, fast recipe, 1,500 steps",
        (
            "headline/etth1-96-fpt-fast1500-seed0",
            "headline/etth1-96-fpt-fast1500-seed1",
            "headline/etth1-96-fpt-fast1500-seed2",
        ),
        horizon=96,
    ),
    Headline(
        "ETTh2, look-back 336",
        "DLinear (`--model linear`), its recipe chosen on ETTh2 validation",
        tuple(f"forecasting/linear_etth2/ETTh2-h96-seed{seed}" for seed in range(3)),
        horizon=96,
    ),
    Headline(
        "ETTh2, look-back 336",
        "frozen MiniLM, the ETTh1 row's recipe and budget",
        tuple(f"headline/etth2-96-fpt-fast1500-seed{seed}" for seed in range(3)),
        horizon=96,
    ),
    *(
        Headline(f"{dataset}, look-back 336", model, (), average_of=pattern)
        for dataset in ("ETTh1", "ETTh2")
        for model, pattern in (
            ("DLinear (`--model linear`), the H=96 row's recipe", _linear_pattern(dataset)),
            ("frozen MiniLM, the H=96 row's recipe and budget", _fpt_forecast_pattern(dataset)),
        )
    ),
    Headline(
        "JapaneseVowels (UEA)",
        "frozen MiniLM, pretrained, raw series, 1,000 steps",
        (
            "headline/japanese-vowels-fpt-fast1k-val50-raw-seed0",
            "headline/japanese-vowels-fpt-fast1k-val50-raw-seed1",
            "headline/japanese-vowels-fpt-fast1k-val50-raw-seed2",
        ),
    ),
]


def _headline_score(run: Path) -> tuple[float, str]:
    """A run's reported accuracy and where it was scored: the test split scored once at the end where
    the run has one apart from the split it watched, else its final evaluation on the split it watched."""
    summary = _json(run / "summary.json")
    final = summary["final"]
    split = {"heldout": "held-out"}.get(final["split"], final["split"])
    evaluation = run / "evaluation.json"
    test = _json(evaluation)["splits"].get("test") if evaluation.exists() else (summary.get("test") or {}).get("test")
    if test is not None and final["split"] != "test":
        return test["accuracy"], f"test ({test['examples']:,}), scored once at the end; {split} watched"
    return final["accuracy"], f"{split} ({final['examples']:,}), watched while training"


def _folders(names: tuple[str, ...]) -> str:
    """`a-seed0`, `a-seed1` -> `a-seed{0,1}`: one cell for the seeds of one recipe."""
    stems = {re.sub(r"seed\d+$", "", name) for name in names}
    if len(names) > 1 and len(stems) == 1:
        seeds = ",".join(re.search(r"seed(\d+)$", name).group(1) for name in names)
        return f"`{stems.pop()}seed{{{seeds}}}`"
    return ", ".join(f"`{name}`" for name in names)


def _average_headline(row: Headline) -> list[str]:
    """A forecast's four-horizon average beside the published one, with the seeds behind each horizon."""
    from fpt.experiments.paper import PUBLISHED_FORECASTS

    per_horizon = _horizon_runs(row.average_of)
    folders = f"`{row.average_of.replace('{h}', '{' + ','.join(map(str, HORIZONS)) + '}')}-seed*`"
    where = (
        f"test MSE / MAE, the average over H={', '.join(map(str, HORIZONS))}, each scored once at the end; val watched"
    )
    if not any(per_horizon):
        return [row.task, row.model, "-", "-", where, folders]
    config = _json(next(runs for runs in per_horizon if runs)[0] / "config.json")
    figures = PUBLISHED_FORECASTS[(config["task"], "avg")]
    model = config.get("model", "fpt")
    named = [model, "PatchTST"] if model == "fpt" else [model]  # beside fpt, PatchTST's: the figure to beat
    paper = "; ".join(f"{figures[n][1]:.3f} / {figures[n][2]:.3f} ({figures[n][0]})" for n in named if n in figures)
    summaries = [_finished(runs) for runs in per_horizon]
    seeds = ", ".join(str(len(_tests(runs))) for runs in summaries)
    ours = f"{_average_cell(summaries)} (seeds per horizon: {seeds})"
    return [row.task, row.model, paper or "-", ours, where, folders]


def headline_table() -> str:
    from fpt.experiments.paper import PUBLISHED_FORECASTS, PUBLISHED_UEA

    rows = []
    for row in HEADLINES:
        if row.average_of:
            rows.append(_average_headline(row))
            continue
        runs = [RESULTS / name for name in row.runs]
        config = _json(runs[0] / "config.json")
        if row.horizon:  # a forecast: test MSE / MAE, scored once at each run's end
            ours = _forecast_cell(_finished(runs))
            published = PUBLISHED_FORECASTS.get((config["task"], row.horizon), {}).get(config.get("model", "fpt"))
            paper = "-" if published is None else f"{published[1]:.3f} / {published[2]:.3f} ({published[0]})"
            where = f"test MSE / MAE, H={row.horizon}, scored once at the end; val watched"
        else:
            scores = [_headline_score(run) for run in runs]
            values = [100 * accuracy for accuracy, _ in scores]
            ours = (
                f"{values[0]:.2f}"
                if len(values) == 1
                else f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f} "
                f"({', '.join(f'{v:.2f}' for v in values)}; {_count(len(values))} seeds)"
            )
            where = "accuracy %, " + scores[0][1]
            uea = PUBLISHED_UEA.get(f"ucr:{(config.get('task_options') or {}).get('dataset')}")
            paper = f"{uea['fpt'][1]} ({uea['fpt'][0]})" if config["task"] == "ucr" and uea else paper_figure(config)
        rows.append([row.task, row.model, paper, ours, where, _folders(row.runs)])
    return _markdown(["task", "model", "paper or published", "ours", "scored on", "runs (benchmarks/results/)"], rows)


# Where the controls ran; every figure of the table is read from the run folders by fpt.experiments.controls.
CONTROLS_NOTE = (
    "Ran on one core of an AMD EPYC (fp32 but MNIST, Fashion-MNIST and ListOps, which ran in bf16; each run's "
    "CPU, with or without native bf16, is in its sittings.jsonl where it has one), shared "
    "with other jobs: the s/step column "
    "measures that contention as much as the arms and is not a benchmark timing. XOR's budget: 100 steps of one "
    "fixed recipe (--recipe fast with a 20-step warm-up), the same for every arm, chosen for the time there was, not "
    "on validation and not at convergence: a short budget favours the arm that learns fastest (Lu et al.'s Table 6: "
    "fpt converges on XOR in about 500 steps, the frozen random transformer in about 2e4). ETTh1 (ett:ETTh1, "
    "look-back 336, horizon 96, channel-independent, MSE / MAE on scaled values): the recipe and budget of the "
    "headline forecasts (--recipe fast, fp32, 1,500 steps, not tuned for forecasts), whose three runs "
    "(headline/etth1-96-fpt-fast1500-seed{0,1,2}) are its fpt arm, copied unchanged into the controls folder; "
    "its shuffled inputs permute each look-back window's 336 time steps before patching. ETTh1 (few-shot: 10% of "
    "train): the same command, recipe and budget with --set train_fraction=0.1, One Fits All's few-shot share: the "
    "first 10% of the training windows (the earliest months; the scaler still fitted on every training row), about "
    "8.4 epochs of them in 1,500 steps, no early stopping, validation and test unchanged, every arm (fpt too) "
    "trained by the command. Bit Memory and "
    "JapaneseVowels (raw series, 50 training series held out as val): the clean headline recipes (--recipe fast, "
    "fp32, 1,000 steps; Bit Memory at a "
    "constant rate), chosen on validation for fpt and given unchanged to every arm; the headline runs are the fpt "
    "arm where they exist (Bit Memory's three, JapaneseVowels' seed 0). MNIST: the 30-minute headline cell's recipe "
    "and budget (7x7 patches, --recipe fast in bf16, 13,000 steps, 5,000 training images held out as val), whose "
    "three runs (headline/mnist-fpt-fast13k-patch7-val5k-bf16-seed{0,1,2}, two threads on two idle cores) are its "
    "fpt arm; the other arms bf16 on one shared core. Fashion-MNIST: MNIST's recipe and budget, unchanged and not "
    "tuned for it, every arm (fpt too) trained by the command. Their full arm (bf16 too, each task's rate chosen "
    "on val) trained on lent GPUs, as its s/step column says: seed 0 of each and MNIST's seed 2 on an NVIDIA H100, "
    "not scored on shuffled inputs (the checkpoints stayed on that machine); the other seeds on an NVIDIA H200, "
    "scored there. ListOps (the official code's input: brackets "
    "stripped, cut to 512 tokens): the converged run's recipe and budget (--recipe fast in bf16, 1,000 steps of 32 "
    "in micro-batches of 8, the first 500 val expressions watched every 50 steps), whose run "
    "(converge/listops-fpt-fast-paper-protocol-seed0) is its fpt arm's seed 0, copied unchanged; fpt's seeds 1 and 2, "
    "the random arm and the full arm (its rate chosen on val) trained on a lent NVIDIA H200 (bf16 is native there, "
    "as on the CPU of seed 0 and of the other arms' runs; fpt's seeds loaded the package's MiniLM weights, their "
    "backbone_hash equal to seed 0's); scored on its test split where the paper quotes val. The none arm keeps "
    "fpt's last-token head, so on a "
    "classification task it reads one token (Tan et al.'s w/o LLM reads every patch through a forecasting "
    "head, as ETTh1's none does): the table after this one gives none a head reading every token. On "
    "JapaneseVowels, full trains every weight from scratch at the shared rate (3e-3), at which it learns nothing: "
    "its row measures that rate, and the second table after this one gives it rates of its own; on every other "
    "task it trained at a rate of its own (XOR's shared-rate runs, at chance too, are kept in "
    "benchmarks/results/controls_full_shared_rate/). A shuffled score over fewer runs than the arm's (n=k of 3) "
    "leaves out runs whose checkpoint stayed on the machine that trained them: benchmarks/results/controls/README.md "
    "says which, and where every run trained."
)


def controls_table() -> str:
    from fpt.experiments.controls import controls_markdown, read_arm_runs
    from fpt.experiments.rate_search import probe_section, read_choices

    root = RESULTS / "controls"  # with how each arm given its own rate (--lr-search) had it chosen
    chart = Path(CONTROLS_CHART).relative_to("benchmarks").as_posix()  # from benchmarks/README.md
    picture = f"![The controls as a picture: each arm's test score per task, its seeds, its shuffled score]({chart})"
    return (
        controls_markdown(read_arm_runs(root), note=CONTROLS_NOTE)
        + f"\n{picture}\n"
        + probe_section(read_choices(root))
    )


def draw_controls_chart(path: Path) -> None:
    """The controls table's picture, from the same run files as the table."""
    from fpt.experiments.controls import read_arm_runs
    from fpt.experiments.plots import controls_chart

    controls_chart(read_arm_runs(RESULTS / "controls"), path)


def controls_chart_is_current(path: Path) -> bool:
    """Whether the picture at `path` was drawn from the run files the controls table is read from."""
    from fpt.experiments.controls import read_arm_runs
    from fpt.experiments.plots import controls_digest, png_description

    return png_description(path) == controls_digest(read_arm_runs(RESULTS / "controls"))


# The none arm keeps fpt's last-token head, so it reads one token; these runs give it a head reading
# every token instead (--pooling flatten), at the same recipe, budget and seeds as the controls' runs.
HEAD_PROBES = {"mnist": "mnist-none-flatten-seed*", "ucr:JapaneseVowels": "japanese-vowels-none-flatten-seed*"}


def _scores(runs) -> str:
    return _scores_of([run.score for run in runs], 2) if runs else "not run"


def _shuffled_evaluation(run) -> float | None:
    """A run's test accuracy (%) on shuffled tokens from `fpt evaluate --shuffle tokens` (evaluation.json),
    or None where it was not scored so, or was scored at another step than the run's last."""
    path = run.path / "evaluation.json"
    evaluation = _json(path) if path.is_file() else {}
    scores = evaluation.get("shuffled", {}).get("splits", {}).get(run.split)
    if evaluation.get("step") != run.steps or scores is None:
        return None
    return 100 * scores["accuracy"]


# What a head probe may differ in from the none arm's run of the same seed: its head, and the threads
# (the controls sweep records its one thread; a plain fpt train records none).
PROBE_MAY_DIFFER = {"pooling", "threads"}


def _check_probe(probe, arm_runs, may_differ: set[str] = PROBE_MAY_DIFFER) -> None:
    """Exit naming the settings where a probe run is not its seed's run of the arm (`arm_runs`) but
    for `may_differ` (a head probe: its head)."""
    for run in arm_runs:
        if run.seed == probe.seed:
            ours, theirs = _json(probe.path / "config.json"), _json(run.path / "config.json")
            keys = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
            if set(keys) - may_differ:
                sys.exit(
                    f"{probe.path}: differs from {run.path} in {', '.join(keys)}; rerun it with the cell's arguments"
                )


def controls_head_table() -> str:
    from fpt.experiments.controls import read_arm_run, read_arm_runs

    controls = read_arm_runs(RESULTS / "controls")
    rows = []
    for task, pattern in HEAD_PROBES.items():
        found = (read_arm_run(path) for path in sorted((RESULTS / "controls_flatten").glob(pattern)))
        flatten = [run for run in found if run is not None and run.task == task]  # finished runs of this task
        shuffled = [score for score in map(_shuffled_evaluation, flatten) if score is not None]
        arm = {name: [r for r in controls if r.task == task and r.arm == name] for name in ("fpt", "none")}
        for probe in flatten:
            _check_probe(probe, arm["none"])
        rows.append(
            [
                f"`{task}`",
                _scores(arm["fpt"]),
                _scores(arm["none"]),
                _scores(flatten),
                f"{statistics.mean(shuffled):.1f} (n={len(shuffled)})" if shuffled else "-",
                f"{flatten[0].trained_params:,}" if flatten else "-",
            ]
        )
    header = [
        "task (test accuracy %)",
        "fpt",
        "none, the last token's head",
        "none, a head reading every token",
        "the latter on shuffled tokens",
        "its trained params",
    ]
    return _markdown(header, rows)


# JapaneseVowels' full arm (every weight from scratch) at rates of its own, chosen on val: at the shared
# recipe's 3e-3 it stays at chance. Each run is its seed's controls run but for the rate (and threads).
FULL_RATE_PROBES = "japanese-vowels-full-lr*-seed*"


def _rate_row(label: str, runs, chosen: str) -> list[str]:
    finals = [_json(run.path / "summary.json")["final"] for run in runs]
    val = [100 * final["accuracy"] for final in finals]
    loss = [final["loss"] for final in finals]
    return [label, chosen, _scores_of(val), _scores_of(loss, 3), _scores(runs)]


def _scores_of(values: list[float], digits: int = 1) -> str:
    from fpt.experiments.controls import mean_std

    return f"{mean_std(values, digits)} (n={len(values)})"


def controls_full_rate_table() -> str:
    from fpt.experiments.controls import read_arm_run, read_arm_runs
    from fpt.experiments.rate_search import val_key

    task = "ucr:JapaneseVowels"
    controls = [r for r in read_arm_runs(RESULTS / "controls") if r.task == task]
    shared = [r for r in controls if r.arm == "full"]
    probes = [r for r in map(read_arm_run, sorted((RESULTS / "controls_full_lr").glob(FULL_RATE_PROBES))) if r]
    by_rate: dict[float, list] = {}
    for probe in probes:
        _check_probe(probe, shared, {"lr", "threads"})
        by_rate.setdefault(_json(probe.path / "config.json")["lr"], []).append(probe)
    # the rate chosen as --lr-search chooses: seed 0's final val accuracy, then its val loss, then the lower rate
    seed0 = {rate: r.path for rate, runs in by_rate.items() for r in runs if r.seed == 0}
    chosen = min(seed0, key=lambda rate: (val_key(seed0[rate]), rate)) if seed0 else None
    rows = [_rate_row("fpt, the shared recipe's 3e-3", [r for r in controls if r.arm == "fpt"], "-")]
    rows.append(_rate_row("full, the shared recipe's 3e-3", shared, "-"))
    for rate in sorted(by_rate):
        rows.append(
            _rate_row(f"full, {_rate(rate)}", by_rate[rate], "yes, on seed 0's val" if rate == chosen else "no")
        )
    header = ["arm, rate", "chosen", "val accuracy % (50 series)", "val loss", "test accuracy %"]
    return _markdown(header, rows)


TABLES: dict[str, Callable[[], str]] = {
    "headline": headline_table,
    "converged": converged_table,
    "table6-mnist": table6_mnist,
    "recipes": recipes_table,
    "speed": speed_table,
    "speed-listops": speed_listops_table,
    "compile": compile_table,
    "int8": int8_table,
    "int8-step": int8_step_table,
    "time-to-accuracy": time_to_accuracy_table,
    "memory": memory_table,
    "listops-budget": listops_budget_table,
    "bit-memory-budget": bit_memory_budget_table,
    "mnist-budget": mnist_budget_table,
    "bit-xor-budget": bit_xor_budget_table,
    "data-parallel": data_parallel_table,
    "paper-tables-xor": paper_tables_xor,
    "paper-tables-images": paper_tables_images,
    "recipe-search": recipe_search_table,
    "dropout-probe": dropout_probe_table,
    "lr-probe": lr_probe_table,
    "table6-xor": table6_xor,
    "forecasting": forecasting_table,
    "uea": uea_table,
    "controls": controls_table,
    "controls-head": controls_head_table,
    "controls-full-rate": controls_full_rate_table,
}


# --- where each table lives ----------------------------------------------------------------------

# The front page carries only the headline; every other table sits in benchmarks/README.md beside
# the notes that explain it. Paths are relative to the repository root (--root in the tests).
FRONT = "README.md"
BENCHMARKS = "benchmarks/README.md"
HOMES = {name: FRONT if name == "headline" else BENCHMARKS for name in TABLES}
# a table's picture, drawn from the same files whenever the table is written: where it lies, how it is
# drawn, and whether a picture there was drawn from the files as they are
CHARTS: dict[str, tuple[str, Callable[[Path], None], Callable[[Path], bool]]] = {
    "controls": (CONTROLS_CHART, draw_controls_chart, controls_chart_is_current)
}


def _pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- table:{re.escape(name)} -->\n)(.*?)(<!-- /table:{re.escape(name)} -->)", re.S)


def render(names=None) -> dict[str, str]:
    return {name: TABLES[name]().rstrip("\n") + "\n" for name in (names or TABLES)}


def by_home(tables: dict[str, str]) -> dict[str, dict[str, str]]:
    """{file: {table: text}} for the files these tables live in."""
    homes: dict[str, dict[str, str]] = {}
    for name, table in tables.items():
        homes.setdefault(HOMES[name], {})[name] = table
    return homes


def differences(text: str, tables: dict[str, str]) -> list[str]:
    """The tables whose text in `text` (the file they live in) is not what the files give, each with why."""
    found = []
    for name, table in tables.items():
        match = _pattern(name).search(text)
        if match is None:
            found.append(f"{name}: no <!-- table:{name} --> ... <!-- /table:{name} --> markers in {HOMES[name]}")
        elif match.group(2) != table:
            found.append(f"{name}: differs from what the files give")
    return found


def update(text: str, tables: dict[str, str]) -> str:
    for name, table in tables.items():
        pattern = _pattern(name)
        if pattern.search(text) is None:
            raise SystemExit(
                f"{HOMES[name]} has no markers for table {name!r}: put <!-- table:{name} --> and "
                f"<!-- /table:{name} --> on lines of their own where it belongs"
            )
        text = pattern.sub(lambda m: m.group(1) + table + m.group(3), text, count=1)
    return text


def strays(root: Path) -> list[str]:
    """Markers of a table in a file it does not live in: the script would never rewrite them."""
    found = []
    for home in (FRONT, BENCHMARKS):
        text = (root / home).read_text()
        found += [
            f"{name}: markers in {home}, but the table lives in {HOMES[name]}"
            for name in TABLES
            if HOMES[name] != home and f"<!-- table:{name} -->" in text
        ]
    return found


def untracked_runs(results: Path) -> list[str]:
    """The run files under `results` (summary.json, metrics.jsonl) that git does not track.

    The tables read every run folder there, tracked or not: a table written from an unfinished sweep
    or an uncommitted run quotes figures no clone has (it happened once). Ignored files count too: a
    sweep's runs/ folders are ignored by .gitignore and committed with `git add -f`. Empty outside a
    checkout or without git.
    """
    try:
        listing = subprocess.run(
            ["git", "ls-files", "--others", "--", "."], cwd=results, capture_output=True, text=True
        )
    except OSError:  # no git on this machine: nothing to compare with
        return []
    if listing.returncode != 0:
        return []
    names = [name for name in listing.stdout.splitlines() if Path(name).name in ("summary.json", "metrics.jsonl")]
    return sorted(str(results / name) for name in names)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs")
    parser.add_argument("--print", dest="show", choices=list(TABLES), help="print one table")
    parser.add_argument("--root", type=Path, default=ROOT, help="the folder holding README.md and benchmarks/README.md")
    parser.add_argument(
        "names",
        nargs="*",
        choices=[[]] + list(TABLES),
        metavar="NAME",
        help=f"only these tables (default: all): {', '.join(TABLES)}",
    )
    parser.add_argument(
        "--allow-untracked", action="store_true", help="write even where a run under benchmarks/results is untracked"
    )
    args = parser.parse_args(argv)
    if args.show:
        print(render([args.show])[args.show], end="")
        return 0
    untracked = [] if args.check or args.allow_untracked else untracked_runs(RESULTS)
    if untracked:
        print(
            f"{untracked[0]} (and {len(untracked) - 1} more) is not tracked by git, and a table may quote it: "
            "git add -f its run's files, or move an unfinished run out of benchmarks/results "
            "(--allow-untracked writes anyway)",
            file=sys.stderr,
        )
        return 2
    homes = by_home(render(args.names))
    if args.check:
        wrong = strays(args.root)
        for home, tables in homes.items():
            wrong += [f"{home}: {line}" for line in differences((args.root / home).read_text(), tables)]
        for name, (path, _, is_current) in _charts(homes):
            if not (args.root / path).is_file():
                wrong.append(f"{path}: missing; the {name} table shows it")
            elif not is_current(args.root / path):
                wrong.append(f"{path}: drawn from other runs than the {name} table's, or by older drawing code")
        for line in wrong:
            print(line, file=sys.stderr)
        if wrong:
            print("rerun: python benchmarks/readme_tables.py (then read the diff)", file=sys.stderr)
        return 1 if wrong else 0
    for home, tables in homes.items():
        path = args.root / home
        text = path.read_text()
        new = update(text, tables)
        if new != text:
            path.write_text(new)
        print(f"{len(tables)} tables written into {home}")
    for _, (path, draw, _) in _charts(homes):
        draw(args.root / path)
        print(f"{path} drawn")
    return 0


def _charts(homes: dict[str, dict[str, str]]) -> list[tuple[str, tuple]]:
    """The pictures of the tables being written or checked."""
    return [(name, CHARTS[name]) for tables in homes.values() for name in tables if name in CHARTS]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
