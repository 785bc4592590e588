"""How well a finished run fits its own training data: accuracy on the first N training examples,
beside its held-out accuracy, to tell underfitting from overfitting.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/train_fit.py RUN_DIR [RUN_DIR ...] --examples 5000

Writes train_fit.json into each run directory ({"step", "examples", "accuracy"}). The examples are
the training split as the run saw it (after any carved-out val), without augmentation.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from fpt.core.paths import atomic_write
from fpt.training.inference import predict_probabilities
from fpt.training.lifecycle import load_run


def train_accuracy(run_dir: Path, examples: int, batch_size: int = 256) -> dict:
    run = load_run(run_dir)
    task, train = run.task, run.task.train
    count = min(examples, len(train))
    # the task's own evaluation batches (no augmentation; variable-length rows masked as in training)
    batches = [
        task.make_batch(train, torch.arange(start, min(start + batch_size, count)), None)
        for start in range(0, count, batch_size)
    ]
    probabilities = predict_probabilities(run.model, batches)
    accuracy = (probabilities[:, 0].argmax(-1) == train.y[:count]).float().mean().item()
    return {"step": run.trainer.step, "examples": count, "accuracy": round(accuracy, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--examples", type=int, default=5000)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.examples < 1:
        parser.error(f"--examples must be at least 1, got {args.examples}")
    torch.set_num_threads(args.threads)
    for run_dir in args.runs:
        result = train_accuracy(run_dir, args.examples)
        text = json.dumps(result, indent=2) + "\n"
        atomic_write(run_dir / "train_fit.json", lambda tmp: tmp.write_text(text))
        print(
            f"{run_dir}: {result['accuracy']:.2%} on its first {result['examples']} training examples "
            f"at step {result['step']}"
        )


if __name__ == "__main__":
    main()
