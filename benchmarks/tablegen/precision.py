"""Precisions (benchmarks/int8.py and the headline cells run in each): the `int8`, `int8-step` and
`time-to-accuracy` tables of benchmarks/speed.md."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from .common import HEADLINE, RESULTS, _json, _jsonl, _markdown, _pct

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
