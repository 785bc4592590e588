"""The classical baselines over the windows of one multivariate series (`--task ett:ETTh1`,
`forecast:FILE.csv`), on exactly the windows fpt is scored on: each (window, channel) look-back is a
series of its own, forecast `horizon` steps by statsforecast's Naive, SeasonalNaive, Theta and
AutoETS (through fpt.reference.classical, as a collection's baselines are), and scored by MSE and
MAE over every forecast value against the window's targets, on the task's scaled values: the long-horizon
tables' protocol, the numbers fpt's own test score gives.

The models are fitted on the scaled look-backs, the values fpt reads. The scaler is one affine map per
column, under which Naive, SeasonalNaive and the additive forms of Theta and ETS give the same forecasts
as in the file's units; the multiplicative forms, which need positive values, are left out (AutoETS
tries them on the 45% of ETTh1's raw test look-backs that are positive and takes twice as long: 150 ms
a series against 80, measured).

The season is the data's daily, weekly or yearly cycle in steps (`task.notes["period"]`: 24 for hourly
ETTh), 1 where it is longer than the look-back (a season not seen once cannot be repeated).

Cost: ETTh1's test split at look-back 336 and horizon 96 is 2,785 windows x 7 channels = 19,495
series. Measured on one core of this shared 2-core machine, alone and with the machine's load at 5:
Naive and SeasonalNaive 11 s together for all of them; Theta 5.9 ms a series alone, 9.8 ms loaded
(190 s for all); AutoETS 80 ms alone, 164 ms loaded (26 to 53 minutes for all: its seasonal forms
fit 24 seasonal states; 320 s for every 10th window's 1,953 series). A model past its MAX_SERIES is
fitted on every k-th window, each with all its channels (fpt.tasks.forecasting.ForecastTask.subset_index,
the same windows an --eval-subset scores), and its record says so: `"windows": "test[::20 windows]"`,
with fpt's own score on those same windows (`"fpt"`), which is what it is compared with. The test
windows overlap (one starts every step), so every 20th of ETTh1's still reads every test hour.
"""

from __future__ import annotations

import numpy as np
import torch

from fpt.data.collection import SeriesCollection
from fpt.reference.classical import baseline_forecasts

WINDOW_BASELINES = ("Naive", "SeasonalNaive", "Theta", "AutoETS")
# (window, channel) series a model is fitted on at most, past which every k-th window: about 2.5 to 4
# minutes for Theta (25,000 at 5.9 to 9.8 ms a series: all of ETTh1's) and 1.5 to 3 for AutoETS (1,000 at
# 80 to 164 ms: ETTh1's every 20th window), measured above; all the baselines then take about 3 to 6 minutes
MAX_SERIES = {"Theta": 25_000, "AutoETS": 1_000}


def window_period(task) -> int:
    """The seasonal baselines' season: the data's (notes "period"), or 1 where it is longer than the look-back."""
    period = int(task.notes.get("period", 1))
    return period if period <= task.notes["lookback"] else 1


def windows_fitted(task, split: str, model: str) -> tuple[torch.Tensor, str | None]:
    """The examples (window x channel indices) of `split` that baseline `model` is fitted on: all of
    them, or every k-th window's (with its subset's name, "[::k windows]") where there are more than
    MAX_SERIES[model]."""
    data = task.eval_split_data(split)
    limit = MAX_SERIES.get(model)
    subset = None if limit is None else task.subset_index(split, limit)
    if subset is None:
        return torch.arange(len(data)), None
    return subset


def value_errors(forecasts: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    """MSE and MAE over every forecast value, in float64, as fpt.training.evaluation scores a model."""
    error = np.asarray(forecasts, dtype=np.float64) - np.asarray(targets, dtype=np.float64)
    return {"mse": float(np.square(error).mean()), "mae": float(np.abs(error).mean())}


def window_forecasts(task, split: str, index: torch.Tensor, models) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """({model: forecasts (N, horizon) float64}, the targets (N, horizon) float64) of examples `index`
    of a split, each example's look-back a series of its own."""
    x, y = task.eval_split_data(split).examples(index)
    histories = list(x.double().numpy())
    ids = [str(i) for i in index.tolist()]  # unique: statsforecast keys its series by id
    collection = SeriesCollection(f"{task.name} {split} windows", ids, histories, y.shape[1], window_period(task))
    forecasts = baseline_forecasts(collection, models=tuple(models), histories=histories)
    return {name: np.stack(values) for name, values in forecasts.items()}, y.double().numpy()


def window_baseline_scores(task, split: str, models=WINDOW_BASELINES, fpt_on=None) -> dict[str, dict]:
    """{model: {"mse", "mae"}} on `split`'s windows; a model fitted on every k-th window only also has
    "windows" (the subset's name, e.g. "test[::10 windows]") and, where `fpt_on(limit)` is given (fpt's
    scores on the subset --eval-subset `limit` picks, fpt.training.evaluation.evaluate's), "fpt": fpt's
    MSE and MAE on those same windows. Models fitted on the same windows share one statsforecast table."""
    groups: dict[str | None, list[str]] = {}
    for name in models:
        groups.setdefault(windows_fitted(task, split, name)[1], []).append(name)
    scores = {}
    for subset, names in groups.items():
        index, _ = windows_fitted(task, split, names[0])
        forecasts, targets = window_forecasts(task, split, index, names)
        for name in names:
            scores[name] = value_errors(forecasts[name], targets)
            if subset is not None:
                scores[name]["windows"] = f"{split}{subset}"
                if fpt_on is not None:
                    mine = fpt_on(MAX_SERIES[name])
                    scores[name]["fpt"] = {"mse": mine["mse"], "mae": mine["mae"]}
    return {name: scores[name] for name in models}
