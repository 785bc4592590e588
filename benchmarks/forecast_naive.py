"""The last-value (naive) forecast on ETTh1/ETTh2: validation and test MSE/MAE per horizon, on
fpt's forecasting protocol (fpt.tasks.forecasting), with the protocol's facts beside them (split
rows, windows, examples, the scaler) so a reader can check them.

    python benchmarks/forecast_naive.py --data-dir ../shared/data/ett --out benchmarks/results/forecasting/naive.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fpt.models.baselines.forecast import NaiveForecast
from fpt.tasks import create_task
from fpt.training.evaluation import evaluate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--datasets", default="ETTh1,ETTh2")
    parser.add_argument("--lookback", type=int, default=336)
    parser.add_argument("--horizons", default="96,192,336,720")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for dataset in args.datasets.split(","):
        for horizon in map(int, args.horizons.split(",")):
            task = create_task(f"ett:{dataset}", data_dir=args.data_dir, lookback=args.lookback, horizon=horizon)
            model = NaiveForecast(horizon)
            scores = {split: evaluate(model, task, split=split) for split in ("val", "test")}
            notes = {
                k: task.notes[k]
                for k in ("split_rows", "windows", "examples", "first_target_date", "scaler_mean", "scaler_std")
            }
            rows.append(
                {
                    "dataset": dataset,
                    "lookback": args.lookback,
                    "horizon": horizon,
                    **notes,
                    **{f"{split}_{m}": scores[split][m] for split in scores for m in ("mse", "mae")},
                }
            )
            print(
                f"{dataset} H={horizon}: val MSE {scores['val']['mse']:.4f} MAE {scores['val']['mae']:.4f}, "
                f"test MSE {scores['test']['mse']:.4f} MAE {scores['test']['mae']:.4f} "
                f"(test windows {task.notes['windows']['test']}, examples {scores['test']['examples']})"
            )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"model": "naive (last value)", "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
