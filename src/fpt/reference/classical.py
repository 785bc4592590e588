"""The classical baselines over a collection of series, and their scores.

Every baseline but Naive2 is statsforecast's own model (Naive, SeasonalNaive, Theta, AutoETS,
AutoARIMA), run through `StatsForecast(freq=1, n_jobs=1)` on a long table of integer time steps: the
collection's dates are not needed to forecast the next `horizon` steps. Naive2, which statsforecast
does not have, is M4's (fpt.tasks.forecast_metrics.naive2). statsforecast is optional: install it
with `pip install "fpt[forecasting]"`.
"""

from __future__ import annotations

import warnings

import numpy as np

from fpt.core.errors import FptError, require
from fpt.data.collection import SeriesCollection
from fpt.tasks.forecast_metrics import PIP, collection_scores, naive2

BASELINES = ("Naive", "SeasonalNaive", "Naive2", "Theta", "AutoETS")
OPTIONAL = ("AutoARIMA",)  # minutes where the others take seconds: asked for by name
KNOWN = BASELINES + OPTIONAL


def baseline_forecasts(collection: SeriesCollection, models=BASELINES, histories=None) -> dict[str, list[np.ndarray]]:
    """Forecast `collection.horizon` steps after each history with each baseline named in `models`
    (from KNOWN); returns {model: one (horizon,) float64 array per series, in `collection.ids` order}.

    histories: the series to forecast from, one per series (default `collection.history`; a task
    passes its histories cut short to forecast its validation horizon). Seasonal models use
    `collection.period`.

    Series too short for a model do not stop the run (statsforecast 2.1.1's behaviour, measured):
    SeasonalNaive on a history shorter than one period has no value for some seasons (statsforecast
    returns NaN there), so such a series gets the Naive forecast, its last value; so does a series
    any model gives a non-finite forecast. Theta refuses a history of 3 values or fewer, AutoETS one
    of 6 or fewer ("tiny datasets"); such a series, and any other that makes a model raise, gets
    statsforecast's Naive as `fallback_model`. Either way a warning says how many series of which
    model fell back. Seasonal models on short histories need no fallback: Theta tests for
    seasonality only from 2 periods of data, AutoETS fits seasonal forms only to a history longer
    than one period.
    """
    histories = _histories(collection, histories)
    unknown = [name for name in models if name not in KNOWN]
    if unknown:
        raise FptError(f"no baseline named {unknown[0]!r}; choose from {', '.join(KNOWN)}")
    names = [name for name in dict.fromkeys(models) if name != "Naive2"]
    forecasts = {}
    if names and len(collection):
        forecasts = _statsforecast(collection, histories, names)
    elif names:
        forecasts = {name: [] for name in names}
    if "Naive2" in models:
        forecasts["Naive2"] = [naive2(history, collection.horizon, collection.period) for history in histories]
    return {name: forecasts[name] for name in dict.fromkeys(models)}


def baseline_scores(collection: SeriesCollection, forecasts: dict, *, actuals=None, histories=None) -> dict[str, dict]:
    """Score each baseline's forecasts (`baseline_forecasts`' answer) with `collection_scores`,
    OWA against Naive2: its forecasts in `forecasts`, or made here from the same histories.
    actuals, histories: as in `collection_scores` (a validation horizon's actuals and the histories
    cut short that the forecasts were made from)."""
    naive2_forecasts = forecasts.get("Naive2")
    if naive2_forecasts is None:
        given = collection.history if histories is None else histories
        naive2_forecasts = [naive2(history, collection.horizon, collection.period) for history in given]
    return {
        name: collection_scores(collection, predicted, naive2_forecasts, actuals=actuals, histories=histories)
        for name, predicted in forecasts.items()
    }


def _histories(collection: SeriesCollection, histories) -> list[np.ndarray]:
    """The histories to forecast from, checked: one finite 1-D series per id, ids unique."""
    histories = collection.history if histories is None else histories
    if len(histories) != len(collection):
        raise FptError(
            f"{len(histories)} histories for the {len(collection)} series of {collection.name!r}; give one per series"
        )
    if len(set(collection.ids)) != len(collection.ids):
        repeated = next(i for i in collection.ids if collection.ids.count(i) > 1)
        raise FptError(f"series id {repeated!r} names two series of {collection.name!r}; give each series its own id")
    checked = []
    for series_id, history in zip(collection.ids, histories):
        history = np.asarray(history, dtype=np.float64)
        if history.ndim != 1 or not len(history) or not np.isfinite(history).all():
            raise FptError(
                f"series {series_id!r} of {collection.name!r}: its history must be a non-empty 1-D array of "
                f"finite numbers (shape {history.shape}); fill or drop the gaps first"
            )
        checked.append(history)
    return checked


def _model(models_module, name: str, period: int):
    if name == "Naive":
        return models_module.Naive()
    return getattr(models_module, name)(season_length=period)  # SeasonalNaive, Theta, AutoETS, AutoARIMA


def _counting_naive(naive_class):
    """statsforecast's Naive as a fallback_model that counts the series it stood in for (statsforecast
    falls back silently; a table of scores should say how often)."""

    class CountingNaive(naive_class):
        def __init__(self):
            super().__init__()
            self.used = 0

        def forecast(self, *args, **kwargs):
            self.used += 1
            return super().forecast(*args, **kwargs)

    return CountingNaive()


def _statsforecast(collection: SeriesCollection, histories: list[np.ndarray], names: list[str]) -> dict:
    """Each statsforecast model's forecasts, re-aligned to the collection's order (statsforecast sorts
    the ids), one StatsForecast run per model so that its fallbacks can be counted."""
    require("statsforecast", PIP)
    import pandas as pd  # a dependency of statsforecast
    from statsforecast import StatsForecast
    from statsforecast import models as models_module

    lengths = np.array([len(h) for h in histories])
    ids = np.asarray(collection.ids, dtype=object)
    frame = pd.DataFrame(
        {
            "unique_id": np.repeat(ids, lengths),
            "ds": np.concatenate([np.arange(n) for n in lengths]),
            "y": np.concatenate(histories),
        }
    )
    horizon, n = collection.horizon, len(collection)
    forecasts = {}
    for name in names:
        fallback = _counting_naive(models_module.Naive)
        runner = StatsForecast(
            models=[_model(models_module, name, collection.period)], freq=1, n_jobs=1, fallback_model=fallback
        )
        with (
            warnings.catch_warnings()
        ):  # replaced below by the Naive forecast: statsforecast's NaN warning would mislead
            warnings.filterwarnings("ignore", message="Historical data .* shorter than season_length")
            result = runner.forecast(df=frame, h=horizon)
        row = pd.Index(ids).get_indexer(result["unique_id"])
        values = np.full((n, horizon), np.nan)
        values[row, result["ds"].to_numpy() - lengths[row]] = result[name].to_numpy(dtype=np.float64)
        # a season SeasonalNaive never saw, or any other value a model could not give, is NaN here
        lost = ~np.isfinite(values).all(axis=1)
        if lost.any():
            values[lost] = np.array([h[-1] for h, gone in zip(histories, lost) if gone])[:, None]
        fell_back = fallback.used + int(lost.sum())
        if fell_back:
            warnings.warn(
                f"{name} could not forecast {fell_back} of the {n} series of {collection.name!r} (too short, or "
                "statsforecast raised); they have the Naive forecast (their last value) instead",
                stacklevel=3,
            )
        forecasts[name] = list(values)
    return forecasts
