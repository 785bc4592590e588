"""ETTh2's protocol against the published loader, and the best a linear map can do on it.

1. Rebuilds Dataset_ETT_hour (Informer / Autoformer / LTSF-Linear: border1s = [0, 8640 - L, 11520 - L],
   border2s = [8640, 11520, 14400], StandardScaler fitted on rows [0, 8640)) in numpy, independently of
   fpt, and checks that fpt's windows (`ett:ETTh2`) hold the same numbers.
2. DLinear is linear in its look-back (the moving average is a fixed linear map), so every DLinear is
   one Linear(336 -> H) shared by the channels. Fits it in closed form (ridge, bias unpenalised) on the
   training windows, the ridge weight chosen on validation alone, then scores test once: a
   training-recipe-free reference for what DLinear's model class reaches under this protocol.
   Also scores test as LTSF-Linear's test loader does (drop_last=True, batch 32: the last
   2785 % 32 windows dropped).

    python benchmarks/results/forecasting/linear_etth2/protocol_check.py --data-dir /work/shared/data/ett
"""

import argparse
import json

import numpy as np
import pandas as pd
import torch

from fpt.tasks.forecasting import ett

LOOKBACK, MONTH = 336, 30 * 24
LAMBDAS = [0.0, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1e3, 1e4, 1e5]


def published_splits(csv: str, lookback: int) -> dict[str, np.ndarray]:
    """Scaled rows (T, C) of each split, as Dataset_ETT_hour slices them."""
    values = pd.read_csv(csv).iloc[:, 1:].to_numpy(np.float64)
    first = [0, 12 * MONTH - lookback, 16 * MONTH - lookback]
    end = [12 * MONTH, 16 * MONTH, 20 * MONTH]
    mean, std = values[first[0] : end[0]].mean(0), values[first[0] : end[0]].std(0)
    scaled = (values - mean) / std
    return {s: scaled[a:b] for s, a, b in zip(("train", "val", "test"), first, end)}


def windows(rows: np.ndarray, lookback: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (window, channel) pair as x (N, lookback), y (N, horizon); window-major, channel-minor."""
    n = len(rows) - lookback - horizon + 1
    idx = np.arange(n)[:, None] + np.arange(lookback + horizon)
    block = rows[idx].transpose(0, 2, 1).reshape(-1, lookback + horizon)  # (n * C, L + H)
    return block[:, :lookback], block[:, lookback:]


def check(data_dir: str, horizon: int) -> dict:
    """Windows equal to fpt's, and the ridge fit's val/test MSE."""
    splits = published_splits(f"{data_dir}/ETTh2.csv", LOOKBACK)
    task = ett("ETTh2", data_dir=data_dir, lookback=LOOKBACK, horizon=horizon)
    fpt_splits = {"train": task.train, **task.evals}
    data, gaps = {}, {}
    for name, rows in splits.items():
        x, y = windows(rows, LOOKBACK, horizon)
        fx, fy = fpt_splits[name].examples(torch.arange(len(fpt_splits[name])))
        assert fx.shape == x.shape, (name, fx.shape, x.shape)
        gaps[name] = float(max(np.abs(fx.double().numpy() - x).max(), np.abs(fy.double().numpy() - y).max()))
        data[name] = (x, y)
    x, y = data["train"]
    xm, ym = x.mean(0), y.mean(0)  # centring leaves the bias out of the penalty
    gram, cross = (x - xm).T @ (x - xm), (x - xm).T @ (y - ym)
    scores = []
    for lam in LAMBDAS:
        w = np.linalg.solve(gram + lam * np.eye(LOOKBACK), cross)
        mse = {s: float((((data[s][0] - xm) @ w + ym - data[s][1]) ** 2).mean()) for s in ("train", "val")}
        scores.append((mse["val"], lam, w, mse["train"]))
    val, lam, w, train = min(scores, key=lambda s: s[0])
    tx, ty = data["test"]
    err = ((tx - xm) @ w + ym - ty) ** 2
    windows_test = len(tx) // 7
    kept = (windows_test // 32) * 32 * 7  # LTSF-Linear's test loader: drop_last=True, batch 32
    return {
        "horizon": horizon,
        "max_abs_gap_vs_fpt_windows": gaps,
        "windows": {s: len(d[0]) // 7 for s, d in data.items()},
        "ridge_val_mse_by_lambda": {str(s[1]): s[0] for s in scores},
        "chosen_lambda": lam,
        "train_mse": train,
        "val_mse": val,
        "test_mse": float(err.mean()),
        "test_mae": float(np.sqrt(err).mean()),
        "test_mse_drop_last": float(err[:kept].mean()),
        "ols_test_mse": float((((tx - xm) @ np.linalg.solve(gram, cross) + ym - ty) ** 2).mean()),
    }


def main() -> None:
    """Print one JSON row per horizon."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--out")
    args = parser.parse_args()
    rows = [check(args.data_dir, h) for h in (96, 192, 336, 720)]
    for row in rows:
        print(json.dumps({k: v for k, v in row.items() if k != "ridge_val_mse_by_lambda"}))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
