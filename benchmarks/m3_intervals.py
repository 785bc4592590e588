"""The 80% and 95% prediction intervals of fpt's M3 runs (issue 60's target: empirical coverage on M3 test
within 3 points of nominal), for runs trained before a run recorded its intervals when it ended.

    python benchmarks/m3_intervals.py        # reads results/m3, writes results/m3/intervals.json

Each run's checkpoint (kept beside its committed files, not committed itself) is loaded and scored as a
run now scores itself at its end (fpt.training.intervals.conformal_intervals): half-widths from the
validation horizon's residuals, their coverage of the test horizon. The runs are benchmarks/m3_fpt.py's
seeds at each subset's chosen budget (results/m3/results.json); nothing is trained.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path


def coverage(run_dir: Path, threads: int) -> dict:
    """{level: the fraction of the test horizon's values inside the run's interval at that level}."""
    from fpt.training.intervals import conformal_intervals
    from fpt.training.lifecycle import load_run

    loaded = load_run(run_dir, threads=threads)
    return conformal_intervals(loaded.model, loaded.task)["test_coverage"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/m3"))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    chosen = json.loads((args.out / "results.json").read_text())["subsets"]
    record = {"machine": platform.processor() or platform.machine(), "subsets": {}}
    for subset, choice in chosen.items():
        runs = sorted((args.out / subset).glob(f"fast{choice['steps']}-seed*"))
        record["subsets"][subset] = {run.name: coverage(run, args.threads) for run in runs}
        print(f"m3:{subset}: {record['subsets'][subset]}", flush=True)
    (args.out / "intervals.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
