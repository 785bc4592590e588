"""Bit Memory on the default backbone: held-out accuracy after a fixed step budget.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bit_memory.py [--steps 1500] [--init pretrained]

The paper's setting (5 strings of 1000 bits, mask probability 0.5, patch 50 -> 120 tokens),
batch 16, lr 1e-3, evaluated on the fixed 500-example held-out set. Writes a run directory under
benchmarks/results/ and prints the learning curve.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import time
from pathlib import Path

import torch

from fpt.train import TrainConfig, train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--init", default="pretrained")
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    out = Path(__file__).parent / "results" / f"bit_memory_{args.init}_seed{args.seed}"
    shutil.rmtree(out, ignore_errors=True)
    config = TrainConfig(task="bit-memory", backbone="minilm", init=args.init, seed=args.seed, steps=args.steps,
                         eval_every=args.eval_every, batch_size=16)
    started = time.perf_counter()
    summary, run_dir = train(config, out=out, progress=False)
    wall = time.perf_counter() - started
    machine = f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}"
    print(f"Bit Memory, minilm ({args.init}), {args.steps} steps of batch 16, {machine}: {wall:.0f} s in all")
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        print(f"  step {record['step']:>6}: held-out bit accuracy {record['accuracy']:.4f}, "
              f"exact strings {record['exact_match']:.3f}, at {record['elapsed_s']:.0f} s")


if __name__ == "__main__":
    main()
