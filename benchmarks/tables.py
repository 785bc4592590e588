"""The paper's comparison tables on this machine: a thin call of `fpt reproduce`, with this
repository's results folder as the default output.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/tables.py --tasks bit-xor --budget 600 --seeds 3 --parallel 2 \
        --tables table1,table2,table3,table6,table18
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/tables.py --tasks mnist --budget 200 --seeds 3 --parallel 2 \
        --tables table1,table2,table3,table18 --out benchmarks/results/tables_mnist -- --precision bf16

Every variant any requested table needs is run once per seed and task (a resumable sweep under
OUT/<task>/), then each table is written as OUT/<table>.md beside the paper's figures, all of them
in OUT/results.md. Extra `fpt train` options for every run follow `--` (each becomes `fpt reproduce
--set KEY=VALUE`, overriding this script's own); a variant in --skip-variants keeps its cell, marked as skipped.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fpt.cli import main as fpt


def main(argv: list[str]) -> int:
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
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
    settings = [f"{key.lstrip('-')}={value}" for key, value in zip(extra[0::2], extra[1::2])]
    command = [
        "reproduce",
        args.tables,
        "--tasks",
        args.tasks,
        "--budget",
        str(args.budget),
        "--seeds",
        str(args.seeds),
        "--backbone",
        args.backbone,
        "--parallel",
        str(args.parallel),
        "--out",
        str(args.out),
    ]
    if "table6" not in args.tables.split(","):
        # Four points per learning curve: a fixed 1000-example subset in between (MNIST's 10,000
        # test images take a minute), the whole split at the end. Table 6 evaluates as its task says.
        # (An OUT made before this setting is refused as "run with other options": use a new --out.)
        command += ["--set", f"eval_every={max(1, args.budget // 4)}", "--set", "eval_subset=1000"]
    if args.skip_variants:
        command += ["--skip-variants", args.skip_variants]
    for setting in settings:
        command += ["--set", setting]
    return fpt(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
