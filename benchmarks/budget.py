"""Held-out accuracy of one task after a fixed training budget, on the whole evaluation split(s).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/budget.py --task mnist --steps 2000 --batch-size 32
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/budget.py --task bit-memory --steps 1500
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/budget.py --task listops --steps 200 --batch-size 8

Any `fpt train` option can follow as --option value (e.g. --init random, --bucket-window 8).
Writes the run directory under benchmarks/results/, prints the learning curve and, at the end,
every evaluation split of the task (`fpt evaluate`).
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
import time
from pathlib import Path

import torch

from fpt.cli import main as fpt


def main(argv: list[str]) -> int:
    options = dict(zip(argv[0::2], argv[1::2]))
    name = "_".join(
        v.replace("/", "-").replace(":", "-")
        for k, v in options.items()
        if k in ("--task", "--init", "--steps", "--policy", "--seed")
    )
    out = Path(__file__).parent / "results" / f"budget_{name}"
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    status = fpt(["train", *argv, "--out", str(out), "--no-progress"])
    if status:
        return status
    trained = time.perf_counter() - started
    status = fpt(["evaluate", str(out)])
    machine = f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}"
    print(
        f"\n{' '.join(argv)}: training {trained:.0f} s, with final evaluation {time.perf_counter() - started:.0f} s"
        f" ({machine})"
    )
    for line in (out / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        print(
            f"  step {record['step']:>6}: {record['split']} accuracy {record['accuracy']:.4f} "
            f"(exact {record['exact_match']:.3f}) at {record['elapsed_s']:.0f} s"
        )
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
