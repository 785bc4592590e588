"""Prediction intervals for a forecast over a collection of series, by split conformal prediction on
the validation split: each series' validation horizon is a residual the model has never trained on,
so the `level`% quantile of the absolute residuals (per step ahead, in each window's scale) is a
half-width that covers about `level`% of new values, whatever the model is. Chosen over a quantile
head trained with pinball loss because it needs no second training objective, holds for every arm
of the controls alike, and its coverage is checked on the test split, not assumed.

Residuals are in the window's scale (fpt.tasks.collections.window_scale), so one half-width serves
series of any level: an interval is forecast +- half-width x the series' look-back scale.

The windows of one multivariate series (`ett`, `forecast:FILE.csv`, fpt.tasks.forecasting) have a
residual per validation window, channel and step on the task's scaled values (2,785 windows for
ETTh1 at look-back 336): a half-width per column and step ahead, since columns differ in how well
they are forecast, scaled back by the column's training std in `fpt predict`. Consecutive windows
overlap, so their residuals are not independent draws: the test coverage says how far that matters."""

from __future__ import annotations

import math

import torch

from fpt.tasks.forecasting import ForecastTask
from fpt.training.evaluation import predict

LEVELS = (80, 95)


def has_intervals(task) -> bool:
    """Whether a run of `task` records prediction intervals: a collection of series or a forecast's windows."""
    task = getattr(task, "inner", task)
    return hasattr(task, "collection") or isinstance(task, ForecastTask)


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
    if isinstance(task, ForecastTask):
        return window_intervals(model, task)
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


def window_intervals(model, task: ForecastTask) -> dict:
    """A forecast's windows: half-widths per column and step ahead from the validation windows'
    residuals (scaled values), their coverage of the test windows overall and per column."""
    columns = task.notes["columns"]

    def by_channel(split: str) -> torch.Tensor:  # (channels, windows, horizon): examples go window by window
        residuals = _scaled_residuals(model, task, split)
        return residuals.reshape(-1, len(columns), residuals.shape[1]).transpose(0, 1)

    val, test = by_channel("val"), by_channel("test").abs()
    per_column = [conformal_halfwidths(channel) for channel in val]
    widths = {level: torch.tensor([w[level] for w in per_column], dtype=torch.float64) for level in LEVELS}
    inside = {level: test <= w[:, None, :] for level, w in widths.items()}
    return {
        "method": "split conformal on the validation windows' absolute residuals, per column and step ahead, "
        "in the task's scaled values",
        "columns": list(columns),
        "halfwidths": {str(level): w.tolist() for level, w in widths.items()},
        "test_coverage": {str(level): c.double().mean().item() for level, c in inside.items()},
        "test_coverage_by_column": {
            name: {str(level): c[i].double().mean().item() for level, c in inside.items()}
            for i, name in enumerate(columns)
        },
    }


def coverage_line(intervals: dict) -> str:
    """ "intervals (split conformal on validation): 80% cover 78.9% of test values, 95% cover 94.1%" """
    parts = [f"{level}% cover {100 * c:.1f}%" for level, c in intervals["test_coverage"].items()]
    return f"intervals (split conformal on validation): {', '.join(parts)} of the test values"
