"""The paper's comparison tables on this machine: each run once, shared between the tables.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/tables.py --tasks bit-xor --budget 600 --seeds 3 --parallel 2 \
        --tables table1,table2,table3,table6,table18
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/tables.py --tasks mnist --budget 200 --seeds 3 --parallel 2 \
        --tables table1,table2,table3,table18 --out benchmarks/results/tables_mnist -- --precision bf16

For each task, every variant any requested table needs is run once per seed (one sweep per task
under OUT/<task>/, resumable like any sweep), then each table is written from those runs as
OUT/<table>.md with the paper's figures beside ours, and all of them in OUT/tables.md. With
table6 asked for, every run evaluates 20 times, so the same runs also give steps to a threshold. Extra `fpt train`
options for every run follow `--`, e.g. `-- --batch-size 32`; --precision, --checkpointing and --compile
reach the transformer rows only. A variant in --skip-variants keeps its cell, marked as skipped.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import torch

from fpt.sweep import REPRODUCIBLE, SweepSpec, run_sweep, write_results_csv
from fpt.tables import SKIPPED, learning_curves, markdown_table, steps_table
from fpt.train import TRANSFORMER_ONLY_OPTIONS

PAPER_TABLE = {"table1": "table1", "table2": "table2", "table3": "table3", "table6": "table6",
               "table18": "table18", "table20": "table20", "stats-init": "stats-init"}


def main(argv: list[str]) -> int:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", required=True, help="comma list, e.g. bit-xor,mnist")
    parser.add_argument("--tables", default="table1,table2,table3,table6,table18")
    parser.add_argument("--budget", type=int, default=300, help="training steps per run")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--backbone", default="minilm")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (threads are split between them)")
    parser.add_argument("--skip-variants", default="", help="comma list of variants not to run (e.g. vit)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "tables")
    args = parser.parse_args(argv)
    tasks, tables = args.tasks.split(","), args.tables.split(",")
    skip = set(filter(None, args.skip_variants.split(",")))
    # Table 6 needs the learning curve (20 evaluations); the others only the final accuracy, which
    # matters where an evaluation is costly (MNIST's 10,000 test images take about a minute).
    every = max(1, args.budget // 20) if "table6" in tables else args.budget
    options = {"steps": args.budget, "backbone": args.backbone, "eval_every": every}
    options.update({k.lstrip("-").replace("-", "_"): v for k, v in zip(extra[0::2], extra[1::2])})

    started = time.perf_counter()
    rows = []
    for task in tasks:
        wanted = list(dict.fromkeys(v for t in tables for v in REPRODUCIBLE[t][0]["variant"]
                                    if task in REPRODUCIBLE[t][0]["task"]))
        variants = [v for v in wanted if v not in skip]
        spec = SweepSpec(f"bench-{task}", {"task": [task], "variant": variants, "seed": list(range(args.seeds))},
                         options, parallel=args.parallel)
        rows += [{**r, "row": r["variant"]} for r in run_sweep(spec, args.out / task)]
        # a skipped variant keeps its table cell, saying so, rather than vanishing from the table
        rows += [{"task": task, "variant": v, "row": v, "status": "skipped", "error": SKIPPED}
                 for v in wanted if v in skip]
    args.out.mkdir(parents=True, exist_ok=True)
    write_results_csv(rows, args.out / "results.csv")
    learning_curves(rows, args.out / "curves.png")

    cores = os.cpu_count() or 1
    machine = (f"{platform.processor() or platform.machine()}, {cores} cores, {args.parallel} run(s) at once "
               f"of {max(1, cores // args.parallel)} thread(s), torch {torch.__version__}")
    setting = ", ".join(f"{k}={v}" for k, v in options.items())
    transformer_only = [k for k in TRANSFORMER_ONLY_OPTIONS if k in options]
    if transformer_only:
        setting += f" ({', '.join(transformer_only)}: transformer rows only)"
    texts = []
    for table in tables:
        variants = REPRODUCIBLE[table][0]["variant"]
        subset = [r for r in rows if r["variant"] in variants]
        title = f"{table} ({setting}; {args.seeds} seeds; {machine})"
        if table == "table6":
            text = steps_table(subset, title + ": steps to the held-out threshold")
        else:
            text = markdown_table(subset, title + ": held-out accuracy in %, paper in parentheses",
                                  PAPER_TABLE.get(table), "variant")
        (args.out / f"{table}.md").write_text(text)
        texts.append(text)
    (args.out / "tables.md").write_text("\n".join(texts))
    print("\n".join(texts))
    ran = [r for r in rows if r["status"] != "skipped"]
    print(f"{len(ran)} runs ({sum(r['status'] == 'failed' for r in ran)} failed) in "
          f"{time.perf_counter() - started:.0f} s; {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
