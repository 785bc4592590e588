"""Prediction intervals for a forecast over a collection of series, by split conformal prediction on
the validation split: each series' validation horizon is a residual the model has never trained on,
so the `level`% quantile of the absolute residuals (per step ahead, in each window's scale) is a
half-width that covers about `level`% of new values, whatever the model is. Chosen over a quantile
head trained with pinball loss because it needs no second training objective, holds for every arm
of the controls alike, and its coverage is checked on the test split, not assumed.

Residuals are in the window's scale (fpt.tasks.collections.window_scale), so one half-width serves
series of any level: an interval is forecast +- half-width x the series' look-back scale."""

from __future__ import annotations

import math

import torch

from fpt.training.evaluation import predict

LEVELS = (80, 95)


def conformal_halfwidths(residuals: torch.Tensor, levels=LEVELS) -> dict[int, list[float]]:
    """{level: half-width per step ahead}: the ceil((n + 1) level / 100)-th smallest absolute residual of
    each step over n series (split conformal's finite-sample quantile; the largest where that is past n)."""
    n = residuals.shape[0]
    ordered = residuals.abs().sort(dim=0).values
    widths = {}
    for level in levels:
        rank = min(n, math.ceil((n + 1) * level / 100)) - 1
        widths[level] = ordered[rank].tolist()
    return widths


def _scaled_residuals(model, task, split: str) -> torch.Tensor:
    """The model's forecast minus the truth, (series, horizon), in each window's scale."""
    data = task.eval_split_data(split)
    truth = task.make_batch(data, torch.arange(len(data)), None).y.double()
    return predict(model, task, split=split).double().reshape(truth.shape) - truth


def conformal_intervals(model, task) -> dict:
    """Half-widths from the validation split and their coverage of the test split: what a run records
    (summary.json "intervals") and `fpt predict` draws."""
    widths = conformal_halfwidths(_scaled_residuals(model, task, "val"))
    test = _scaled_residuals(model, task, "test").abs()
    coverage = {
        level: (test <= torch.tensor(w, dtype=torch.float64)).double().mean().item() for level, w in widths.items()
    }
    return {
        "method": "split conformal on the validation horizon's absolute residuals, per step ahead, in window scale",
        "halfwidths": {str(level): w for level, w in widths.items()},
        "test_coverage": {str(level): c for level, c in coverage.items()},
    }


def coverage_line(intervals: dict) -> str:
    """ "intervals (split conformal on validation): 80% cover 78.9% of test values, 95% cover 94.1%" """
    parts = [f"{level}% cover {100 * c:.1f}%" for level, c in intervals["test_coverage"].items()]
    return f"intervals (split conformal on validation): {', '.join(parts)} of the test values"
