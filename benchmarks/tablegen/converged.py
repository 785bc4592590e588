"""The converged runs (benchmarks/results/converge/ and headline/) and Table 6: the `converged`,
`table6-xor` and `table6-mnist` tables of benchmarks/converged.md."""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

from fpt.experiments.convergence import convergence
from fpt.experiments.paper import PAPER, PAPER_STEPS
from fpt.experiments.tables import run_convergence, steps_data
from fpt.training.run_dir import is_subset, whole_split

from .common import RESULTS, ROOT, _count, _json, _jsonl, _markdown, _pct, _rate


@dataclass(frozen=True)
class Converged:
    run: str  # a run directory, relative to benchmarks/results/
    task: str  # the task column's words
    note: str = ""  # what the row is for, after the recipe read from config.json
    bold: bool = False  # the row's headline figure in bold
    prior: bool = False  # also give the split's majority-label share (ListOps: chance is 1/10 only in name)


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


# --- Table 6 -----------------------------------------------------------------------------------


def table6_xor() -> str:
    """Table 6 on Bit XOR from the committed sweep (benchmarks/results/table6_xor/)."""
    folder = RESULTS / "table6_xor"
    with open(folder / "results.csv", newline="") as handle:
        rows = [dict(r, run_dir=str(ROOT / r["run_dir"])) for r in csv.DictReader(handle)]
    _, labels, cells = steps_data(rows)
    lines = []
    for label in labels:
        cell = cells[(label, "bit-xor")]
        lines.append([label, cell.text, _rate(PAPER_STEPS[label]["bit-xor"])])
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
                _rate(PAPER_STEPS[variant]["mnist"]),
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
