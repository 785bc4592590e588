"""Training time per step of each named recipe, on this machine, evaluation left out.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/recipe_speed.py                 # mnist, 1 and 2 threads
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/recipe_speed.py --task fashion-mnist --threads 1 --dropouts 0.1,0

Run it on an idle machine: the converged runs share their cores with other work, so their own
wall times are not comparable across sittings; time-to-accuracy for a recipe is its steps to that
accuracy (from the run) times its step time here, measured for both recipes in one go. Each
(recipe, dropout, threads) trains in its own process for --warmup + --steps steps; the median of the timed
steps is reported (the final evaluation, on a small validation split, is not timed). Writes
benchmarks/results/recipe_speed.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fpt.core.runtime import bf16_note, cpu_model, usable_cores
from fpt.training.config import RECIPES

RESULTS = Path(__file__).parent / "results" / "recipe_speed.json"

# One process per measurement, so each starts cold and with its own threads. No warm-up of the
# learning rate: it changes no step time, and a short timing run is shorter than the recipe's.
_CHILD = """
import json, sys, time
import fpt
recipe, task, steps, threads, dropout, out = sys.argv[1:7]
steps, threads = int(steps), int(threads)
own = {} if dropout == "recipe" else {"dropout": float(dropout)}  # "recipe": the recipe's own
stamps = []
# a small held-out split for the one untimed evaluation at the end
small = {"val_size": 256} if task in ("mnist", "fashion-mnist", "cifar10") else {"eval_size": 256}
config = fpt.TrainConfig.from_recipe(recipe, task=task, steps=steps, eval_every=steps, eval_subset=None, warmup_steps=0,
                                     threads=threads, task_options=small, **own)
fpt.train(config, out=out, progress=False, on_step=lambda step, loss: stamps.append(time.perf_counter()))
print(json.dumps({"dropout": config.dropout, "gaps": [b - a for a, b in zip(stamps, stamps[1:])]}))
"""


def measure(recipe: str, task: str, warmup: int, steps: int, threads: int, dropout: str) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                _CHILD,
                recipe,
                task,
                str(warmup + steps),
                str(threads),
                dropout,
                str(Path(scratch) / "run"),
            ],
            capture_output=True,
            text=True,
        )
    if done.returncode != 0:
        sys.exit(f"timing {recipe} on {task} failed: {done.stderr.strip().splitlines()[-1:]}")
    timed = json.loads(done.stdout.strip().splitlines()[-1])
    gaps = timed["gaps"][warmup:]  # gap i: the time of step i + 2
    return {
        "recipe": recipe,
        "task": task,
        "threads": threads,
        "dropout": timed["dropout"],
        "steps_timed": len(gaps),
        "ms_per_step": round(1000 * statistics.median(gaps), 1),
        "ms_spread": [round(1000 * min(gaps), 1), round(1000 * max(gaps), 1)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="mnist")
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--threads", default=",".join(str(n) for n in sorted({1, usable_cores()})))
    # dropout changes the step time: without it, attention may take another kernel (fpt.core.devices)
    parser.add_argument(
        "--dropouts", default="recipe", help="comma list of --dropout values to time (default: each recipe's own)"
    )
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    if args.warmup < 0 or args.steps < 1:
        parser.error("--warmup must be at least 0 and --steps at least 1")
    rows = [
        measure(recipe, args.task, args.warmup, args.steps, int(threads), dropout)
        for threads in args.threads.split(",")
        for recipe in args.recipes.split(",")
        for dropout in args.dropouts.split(",")
    ]
    record = {
        "machine": cpu_model(),
        "bf16": bf16_note(),
        "cores": usable_cores(),
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
    }
    previous = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    previous[args.task] = record
    RESULTS.write_text(json.dumps(previous, indent=2) + "\n")
    print(f"{record['machine']}; {record['bf16']}")
    print("| recipe | dropout | threads | ms per step (median) | min - max |\n|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['recipe']} | {row['dropout']:g} | {row['threads']} | {row['ms_per_step']} | "
            f"{row['ms_spread'][0]} - {row['ms_spread'][1]} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
