"""Peak resident memory per task with default flags: the worst training step and the worst
evaluation batch, each task in a fresh process.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/memory.py [--tasks listops,cifar10-lra] [--threads 1]

Worst case, not an average: the training batch is made of the task's longest training examples
and the evaluation batch of its longest held-out examples, at the default --batch-size and
--eval-batch-size. Tasks whose data is not on this machine (CIFAR-10, remote homology) run on
random files written here in their real formats with their real shapes (memory depends on the
shapes only). The target: under 8 GB everywhere, so a laptop can train every task.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TASKS = [
    "bit-memory",
    "bit-xor",
    "mnist",
    "fashion-mnist",
    "cifar10",
    "cifar10-lra",
    "listops",
    "remote-homology",
    "ucr",
]
LIMIT_GB = 8.0


def _synthetic_cifar(folder: Path, n: int = 64) -> str:
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        records = np.concatenate([rng.integers(0, 10, (n, 1)), rng.integers(0, 256, (n, 3072))], axis=1)
        (folder / f"{name}.bin").write_bytes(records.astype(np.uint8).tobytes())
    return str(folder)


def _synthetic_homology(folder: Path, n: int = 300, length: int = 1100) -> str:
    """Proteins longer than the 1024-token cap, so every batch is as long as the task allows."""
    rng = np.random.default_rng(0)
    letters = np.array(list("ACDEFGHIKLMNPQRSTVWY"))
    (folder / "remote_homology").mkdir()
    for split in ("train", "valid", "test_fold_holdout", "test_superfamily_holdout", "test_family_holdout"):
        records = [
            {"primary": "".join(rng.choice(letters, length)), "fold_label": int(rng.integers(0, 1195))}
            for _ in range(n)
        ]
        (folder / "remote_homology" / f"remote_homology_{split}.json").write_text(json.dumps(records))
    return str(folder)


def worker(task_name: str, data_dir: str | None) -> dict:
    import torch

    from fpt.core.runtime import configure_process, limit_heap_fragmentation
    from fpt.tasks.arrays import ArrayTask
    from fpt.training.build import build_model, build_task
    from fpt.training.config import TrainConfig
    from fpt.training.evaluation import evaluate
    from fpt.training.loop import Trainer

    options = {"data_dir": data_dir} if data_dir else {}
    config = TrainConfig(task=task_name, task_options=options, precision="fp32")  # the table measures fp32
    config.validate()
    configure_process(config.threads, config.precision)
    task = build_task(config)
    if task.variable_length:
        limit_heap_fragmentation()
    model = build_model(config, task)
    trainer = Trainer(model, task, config, progress=False)
    model.train()  # as Trainer.fit does: dropout on (a loaded backbone starts in eval mode)
    if isinstance(task, ArrayTask) and task.variable_length:  # the longest examples: the worst batch
        longest = torch.sort(task.train.lengths, descending=True, stable=True).indices[: config.batch_size]
        batch = task.make_batch(task.train, longest, torch.Generator().manual_seed(0))
    else:
        batch = task.train_batch(0, config.batch_size, config.seed)
    started = time.perf_counter()
    trainer.train_step(batch)
    step_s = time.perf_counter() - started
    train_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    if isinstance(task, ArrayTask):  # one evaluation batch of the longest held-out examples
        data = task.eval_split_data()
        order = (
            torch.sort(data.lengths, descending=True, stable=True).indices
            if data.lengths is not None
            else torch.arange(len(data))
        )
        single = type(
            "OneBatch",
            (),
            {
                "spec": task.spec,
                "eval_split": task.eval_split,
                "eval_batches": lambda self, size, split=None: iter([task.make_batch(data, order[:size], None)]),
            },
        )()
        evaluate(model, single, config.eval_batch_size)
    else:
        evaluate(model, task, config.eval_batch_size)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return {
        "task": task_name,
        "seq_len": task.spec.seq_len,
        "batch": len(batch),
        "tokens": int(batch.x.shape[1]),
        "checkpointing": config.checkpointing,
        "micro_batch": config.micro_batch_size,
        "train_peak_gb": round(train_peak, 2),
        "peak_gb": round(peak, 2),
        "train_step_s": round(step_s, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "memory.json")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1] or None)), flush=True)
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        for task in args.tasks.split(","):
            data = ""
            if task in ("cifar10", "cifar10-lra"):
                folder = scratch / "cifar"
                if not folder.exists():
                    folder.mkdir()
                    _synthetic_cifar(folder)
                data = str(folder)
            elif task == "remote-homology":
                folder = scratch / "homology"
                if not folder.exists():
                    folder.mkdir()
                    _synthetic_homology(folder)
                data = str(folder)
            proc = subprocess.run(
                [sys.executable, __file__, "--worker", task, data],
                capture_output=True,
                text=True,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
            )
            if proc.returncode != 0:
                reason = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
                row = {"task": task, "error": reason[:200]}
            else:
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                row["under_8gb"] = row["peak_gb"] < LIMIT_GB
            rows.append(row)
            print(json.dumps(row), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": rows, "cpu_count": os.cpu_count()}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
