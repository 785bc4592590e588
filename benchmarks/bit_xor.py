"""Bit XOR on the default backbone: steps and wall time to 99% held-out accuracy within a time
budget, for pretrained and --init random weights (the paper: random frozen weights fall short).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bit_xor.py [--budget-s 60] [--seeds 0 1 2]

Writes benchmarks/results/bit_xor.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from fpt.core.runtime import configure_process
from fpt.training.build import build
from fpt.training.config import TrainConfig
from fpt.training.evaluation import evaluate
from fpt.training.loop import Trainer


class _OutOfTime(Exception):
    pass


def run(init: str, seed: int, budget_s: float, target: float) -> dict:
    """Train until the target held-out accuracy or until budget_s seconds of training."""
    config = TrainConfig(
        task="bit-xor", backbone="minilm", init=init, seed=seed, steps=100_000, eval_every=25, target_accuracy=target
    )
    started = time.perf_counter()
    configure_process(config.threads)  # as `fpt train` does
    task, model = build(config)
    built = time.perf_counter()

    def stop_when_out_of_time(step: int, loss: float) -> None:
        if time.perf_counter() - built > budget_s:
            raise _OutOfTime

    trainer = Trainer(model, task, config, progress=False, on_step=stop_when_out_of_time)
    try:
        summary = trainer.fit()
        steps, reached, accuracy = summary["step"], summary["target_reached_at_step"], summary["final"]["accuracy"]
    except _OutOfTime:
        steps, reached, accuracy = trainer.step, None, evaluate(model, task)["accuracy"]
    return {
        "init": init,
        "seed": seed,
        "steps": steps,
        "reached_at": reached,
        "accuracy": accuracy,
        "train_s": round(time.perf_counter() - built, 1),
        "total_s": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=60.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--target", type=float, default=0.99)
    args = parser.parse_args()

    rows = []
    for seed in args.seeds:
        for init in ("pretrained", "random"):
            rows.append(run(init, seed, args.budget_s, args.target))
            print(rows[-1], flush=True)

    machine = f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}"
    out = Path(__file__).parent / "results" / "bit_xor.json"
    out.write_text(json.dumps({"machine": machine, "budget_s": args.budget_s, "rows": rows}, indent=2) + "\n")
    print(
        f"\nBit XOR, minilm, batch 16, lr 1e-3, target {args.target:.0%} held-out, "
        f"budget {args.budget_s:.0f} s of training ({machine})\n"
    )
    print("| init | seed | steps | reached target at | held-out accuracy | train s | total s (with load) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['init']} | {r['seed']} | {r['steps']} | {r['reached_at'] or 'not reached'} | "
            f"{r['accuracy']:.4f} | {r['train_s']} | {r['total_s']} |"
        )


if __name__ == "__main__":
    main()
