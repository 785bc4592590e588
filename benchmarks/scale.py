"""One process against data-parallel ranks on this machine, and what that implies for a cluster.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/scale.py              # MiniLM on Bit XOR, 1 vs 2 ranks
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/scale.py --steps 60 --task mnist

Measures, with nothing else running: the time per training step (between two evaluations, so
start-up and the first steps are left out), examples per second, and that both runs end with the
same trained parameters (dropout 0). From the bytes all-reduced per step (the gradients of the
trained parameters only, fp32) it then *projects* the scaling efficiency of 8 GPUs over NVLink
and over 25 Gb/s Ethernet with the usual ring all-reduce cost model, stated as a projection.
Writes benchmarks/results/scale.json.

On a 2-core machine two ranks of one thread each do not beat one process of two threads: they
do the same arithmetic on the same cores, plus the all-reduce. The point of the measurement here
is the overhead of the data-parallel machinery, not a speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from fpt.core.runtime import bf16_note, cpu_model
from fpt.training.checkpoint import load_checkpoint
from fpt.training.run_dir import RunDir

RESULTS = Path(__file__).parent / "results" / "scale.json"
# Ring all-reduce of B bytes on N ranks moves 2 (N - 1) / N * B per rank and pays 2 (N - 1) latencies.
LINKS = {  # (bandwidth in bytes/s one rank can push, latency per hop in s): round public figures
    "NVLink (H100, NCCL bus bandwidth ~300 GB/s)": (300e9, 10e-6),
    "25 Gb/s Ethernet": (25e9 / 8, 50e-6),
}


def train(out: Path, nproc: int, threads: int, args: argparse.Namespace) -> None:
    command = [
        sys.executable,
        "-m",
        "fpt",
        "train",
        "--task",
        args.task,
        "--backbone",
        args.backbone,
        "--steps",
        str(2 * args.steps),
        "--eval-every",
        str(args.steps),
        "--batch-size",
        str(args.batch_size),
        "--dropout",
        "0",
        "--out",
        str(out),
        "--no-progress",
        "--device",
        "cpu",
        *args.task_args,
    ]
    command += ["--nproc", str(nproc)] if nproc > 1 else ["--threads", str(threads)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    subprocess.run(command, env=env, check=True, capture_output=True)


def step_time(out: Path, steps: int) -> float:
    """Seconds per step between the two evaluations (the interval holds the second evaluation:
    keep the held-out split small, as the default 64 Bit XOR examples)."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return (records[1]["elapsed_s"] - records[0]["elapsed_s"]) / steps


def projection(grad_bytes: int, compute_s: float, ranks: int = 8) -> dict[str, float]:
    """Efficiency = compute / (compute + all-reduce), with no overlap of the two (a lower bound:
    DDP overlaps the all-reduce with the backward pass)."""
    result = {}
    for link, (bandwidth, latency) in LINKS.items():
        comm = 2 * (ranks - 1) / ranks * grad_bytes / bandwidth + 2 * (ranks - 1) * latency
        result[link] = round(compute_s / (compute_s + comm), 4)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="bit-xor")
    parser.add_argument("--backbone", default="minilm")
    parser.add_argument("--steps", type=int, default=40, help="steps timed (after as many to warm up)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--nproc", type=int, default=2)
    args, args.task_args = parser.parse_known_args()
    if args.task == "bit-xor" and "--eval-size" not in args.task_args:
        args.task_args += ["--eval-size", "64"]  # evaluations stay out of the timing
    cores = os.cpu_count() or 1
    root = Path(tempfile.mkdtemp(prefix="fpt-scale-"))
    try:
        single, ranks = root / "one", root / "ranks"
        train(single, 1, cores, args)
        train(ranks, args.nproc, max(1, cores // args.nproc), args)
        one, many = load_checkpoint(single / RunDir.CHECKPOINT), load_checkpoint(ranks / RunDir.CHECKPOINT)
        difference = max((one.params[n] - many.params[n]).abs().max().item() for n in one.params)
        grad_bytes = sum(t.numel() * 4 for t in one.params.values())
        t1, tn = step_time(single, args.steps), step_time(ranks, args.steps)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {
        "task": args.task,
        "backbone": args.backbone,
        "batch_size": args.batch_size,
        "steps_timed": args.steps,
        "machine": f"{cpu_model()}, {cores} cores, torch {torch.__version__}; {bf16_note()}",
        "one_process": {"threads": cores, "step_s": round(t1, 4), "examples_per_s": round(args.batch_size / t1, 1)},
        f"{args.nproc}_ranks": {
            "threads_each": max(1, cores // args.nproc),
            "step_s": round(tn, 4),
            "examples_per_s": round(args.batch_size / tn, 1),
        },
        "max_parameter_difference": difference,
        "bytes_all_reduced_per_step": grad_bytes,
        "projected_efficiency_8_ranks": {
            "with this machine's one-process step": projection(grad_bytes, t1),
            "with a 20 ms step (a GPU's order of magnitude)": projection(grad_bytes, 0.020),
        },
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
