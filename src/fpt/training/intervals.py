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
from numbers import Real

import torch

from fpt.core.errors import FptError
from fpt.tasks.forecasting import ForecastTask
from fpt.training.evaluation import predict

LEVELS = (80, 95)  # what a run records, and what `fpt predict` writes unless --level asks for others


def check_levels(levels, what: str = "--level") -> tuple[float, ...]:
    """`levels` as percents, each strictly between 0 and 100, sorted and once each (a level of 100 would be
    the largest residual seen, not a coverage; statsforecast's convention: `level=[80, 95]`), or one line
    naming the fix."""
    if isinstance(levels, (str, bytes)) or not hasattr(levels, "__iter__"):
        levels = [levels]
    checked = []
    for level in levels:
        number = not isinstance(level, bool) and isinstance(level, Real)
        if not (number and 0 < level < 100):
            shown = level_name(level) if number and math.isfinite(level) else repr(level)
            raise FptError(
                f"{what} {shown}: not an interval's level; give percents between 0 and 100, exclusive, "
                "e.g. 80 95 (coverage 0.9 is level 90)"
            )
        checked.append(float(level))
    if not checked:
        raise FptError(f"{what} names no level: give percents between 0 and 100, exclusive, e.g. 80 95")
    return tuple(sorted(set(checked)))


def level_name(level: float) -> str:
    """A level as interval columns name it (Nixtla's `lo-90`, `hi-97.5`): whole percents without a point."""
    return str(int(level)) if float(level).is_integer() else str(float(level))


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


def conformal_intervals(model, task, levels=LEVELS, scored: bool = True) -> dict:
    """Half-widths from the validation split at each of `levels` (percents, fpt.training.intervals.check_levels)
    and, where `scored`, their coverage of the test split: what a run records (summary.json "intervals") and
    `fpt predict` draws; `fpt predict --level` asks for other levels, unscored (the test split is no
    part of a forecast's bounds)."""
    levels = check_levels(levels, "level")
    if isinstance(task, ForecastTask):
        return window_intervals(model, task, levels, scored)
    widths = conformal_halfwidths(_scaled_residuals(model, task, "val"), levels)
    intervals = {
        "method": "split conformal on the validation horizon's absolute residuals, per step ahead, in window scale",
        "halfwidths": {level_name(level): w for level, w in widths.items()},
    }
    if scored:
        test = _scaled_residuals(model, task, "test").abs()
        intervals["test_coverage"] = {
            level_name(level): (test <= torch.tensor(w, dtype=torch.float64)).double().mean().item()
            for level, w in widths.items()
        }
    return intervals


def window_intervals(model, task: ForecastTask, levels=LEVELS, scored: bool = True) -> dict:
    """A forecast's windows: half-widths per column and step ahead from the validation windows'
    residuals (scaled values) and, where `scored`, their coverage of the test windows overall and per column."""
    columns = task.notes["columns"]

    def by_channel(split: str) -> torch.Tensor:  # (channels, windows, horizon): examples go window by window
        residuals = _scaled_residuals(model, task, split)
        return residuals.reshape(-1, len(columns), residuals.shape[1]).transpose(0, 1)

    per_column = [conformal_halfwidths(channel, levels) for channel in by_channel("val")]
    widths = {level: torch.tensor([w[level] for w in per_column], dtype=torch.float64) for level in levels}
    intervals = {
        "method": "split conformal on the validation windows' absolute residuals, per column and step ahead, "
        "in the task's scaled values",
        "columns": list(columns),
        "halfwidths": {level_name(level): w.tolist() for level, w in widths.items()},
    }
    if not scored:
        return intervals
    test = by_channel("test").abs()
    inside = {level_name(level): test <= w[:, None, :] for level, w in widths.items()}
    intervals["test_coverage"] = {name: c.double().mean().item() for name, c in inside.items()}
    intervals["test_coverage_by_column"] = {
        column: {name: c[i].double().mean().item() for name, c in inside.items()} for i, column in enumerate(columns)
    }
    return intervals


def intervals_at(model, task, levels, recorded: dict | None = None) -> dict:
    """The intervals at `levels`: the `recorded` half-widths (a run's summary.json "intervals") where they hold
    every level asked for, so that `--level 80` writes what the run recorded; otherwise all of them again from
    the validation split (`conformal_intervals`, unscored), so that the levels asked for come from one
    calibration and nest."""
    names = [level_name(level) for level in check_levels(levels, "level")]
    halfwidths = (recorded or {}).get("halfwidths", {})
    if all(name in halfwidths for name in names):
        return {"method": recorded.get("method"), "halfwidths": {name: halfwidths[name] for name in names}}
    return conformal_intervals(model, task, levels, scored=False)


def coverage_line(intervals: dict) -> str:
    """ "intervals (split conformal on validation): 80% cover 78.9% of test values, 95% cover 94.1%" """
    parts = [f"{level}% cover {100 * c:.1f}%" for level, c in intervals["test_coverage"].items()]
    return f"intervals (split conformal on validation): {', '.join(parts)} of the test values"


def interval_line(intervals: dict, names: str) -> str:
    """ "with 80% and 95% intervals (split conformal on validation): columns fpt-lo-LEVEL, fpt-hi-LEVEL" """
    levels = [f"{level}%" for level in intervals["halfwidths"]]
    listed = levels[0] if len(levels) == 1 else f"{', '.join(levels[:-1])} and {levels[-1]}"
    return f"with {listed} intervals (split conformal on validation): columns {names}-lo-LEVEL, {names}-hi-LEVEL"
