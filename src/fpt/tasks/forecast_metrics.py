"""The forecasting competitions' metrics over a collection of series: sMAPE (M3, M4), MASE (M4),
OWA against Naive2 (M4), and Naive2 itself, the benchmark OWA is relative to.

Definitions follow the M4 competition's own code ("Benchmarks and Evaluation.R" in
github.com/Mcompetitions/M4-methods): sMAPE in percent, MASE scaled by the in-sample mean absolute
error of the seasonal naive forecast, OWA as the mean of two ratios of collection-level means.
A series whose MASE scale is zero (a constant history) is left out of the MASE mean and counted in
"mase_left_out", never divided by zero.

Plain numpy; statsmodels (a dependency of statsforecast, installed by `pip install "fpt[forecasting]"`)
only for Naive2's autocorrelation and classical decomposition.
"""

from __future__ import annotations

import numpy as np

from fpt.core.errors import FptError, require
from fpt.data.collection import SeriesCollection

PIP = 'pip install "fpt[forecasting]"'
# M4's seasonality test: |acf at lag period| beyond this many standard errors (a 90% two-sided test)
M4_TCRIT = 1.645


def _values(values, what: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or not len(array):
        raise FptError(f"{what} must be a non-empty 1-D sequence of numbers, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise FptError(f"{what} has {int((~np.isfinite(array)).sum())} NaN or infinite values; give finite numbers")
    return array


def _pair(actual, forecast) -> tuple[np.ndarray, np.ndarray]:
    actual, forecast = _values(actual, "the actual values"), _values(forecast, "the forecast")
    if actual.shape != forecast.shape:
        raise FptError(f"the forecast has {len(forecast)} values, the actuals {len(actual)}; give one per step")
    return actual, forecast


def _check_period(period) -> int:
    if isinstance(period, bool) or not isinstance(period, (int, np.integer)) or period < 1:
        raise FptError(f"the seasonal period must be a whole number of at least 1 (1: none), got {period!r}")
    return int(period)


def smape(actual, forecast) -> float:
    """Symmetric MAPE of one series, in percent (M3's and M4's definition): the mean over the values
    of 200 |y - f| / (|y| + |f|). A step where both are 0 is a perfect forecast and counts 0."""
    actual, forecast = _pair(actual, forecast)
    denominator = np.abs(actual) + np.abs(forecast)
    terms = np.divide(
        200.0 * np.abs(actual - forecast), denominator, out=np.zeros_like(denominator), where=denominator > 0
    )
    return float(terms.mean())


def mase(actual, forecast, history, period: int) -> float:
    """Mean absolute scaled error of one series (M4's definition): the mean |y - f| divided by the
    mean absolute in-sample error of the seasonal naive forecast on `history` at lag `period` (lag 1
    where the history is not longer than the period). NaN where that scale is zero or undefined (a
    constant history, or a single value): `collection_scores` leaves such series out and counts them.
    """
    actual, forecast = _pair(actual, forecast)
    history = _values(history, "the history")
    period = _check_period(period)
    lag = period if len(history) > period else 1
    if len(history) <= lag:
        return float("nan")
    scale = np.mean(np.abs(history[lag:] - history[:-lag]))
    if not scale > 0:
        return float("nan")
    return float(np.mean(np.abs(actual - forecast)) / scale)


def is_seasonal(history, period: int) -> bool:
    """M4's 90% seasonality test: the autocorrelation at lag `period` exceeds
    1.645 sqrt((1 + 2 sum_{k<period} acf_k^2) / n). False for period 1, for a history shorter than 3
    periods, and for a constant one (its autocorrelation is undefined; M4's R code says FALSE for NA)."""
    history = _values(history, "the history")
    period = _check_period(period)
    if period == 1 or len(history) < 3 * period or np.ptp(history) == 0:
        return False
    stattools = require("statsmodels.tsa.stattools", PIP)
    # R's acf, which M4's code calls, stops at lag 10 log10(n) and so calls a series with a longer
    # period (24 with under 251 values) never seasonal; that artefact of a default is not copied here
    coefficients = stattools.acf(history, nlags=period, fft=False)  # denominator n, as R's acf
    limit = M4_TCRIT * np.sqrt((1 + 2 * np.sum(coefficients[1:period] ** 2)) / len(history))
    return bool(abs(coefficients[period]) > limit)


def naive2(history, horizon: int, period: int) -> np.ndarray:
    """M4's Naive2 benchmark: the last value of the seasonally adjusted history, re-seasonalised.

    Where `is_seasonal` holds, the history is adjusted by classical multiplicative decomposition
    (statsmodels' seasonal_decompose, the same centred moving average and normalised indices as R's
    decompose, which M4 used) and the forecast is the last adjusted value times the seasonal indices
    of the next `horizon` steps; otherwise it is the last value. A history with a value of 0 or less
    has no multiplicative seasonality and gets the plain last value too (statsmodels refuses it).
    """
    # Hand-written: statsforecast, fpt's source of the other baselines, has no Naive2 (its Naive and
    # SeasonalNaive are M4's Naive1 and sNaive); this follows M4's R code line for line.
    history = _values(history, "the history")
    if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
        raise FptError(f"the horizon must be a whole number of at least 1, got {horizon!r}")
    if not (is_seasonal(history, period) and history.min() > 0):
        return np.full(int(horizon), history[-1])
    seasonal_module = require("statsmodels.tsa.seasonal", PIP)
    seasonal = np.asarray(seasonal_module.seasonal_decompose(history, model="multiplicative", period=period).seasonal)
    # the index of step n + j is that of step n - period + (j mod period): the last cycle, repeated
    return history[-1] / seasonal[-1] * np.resize(seasonal[-period:], int(horizon))


def validation_split(collection: SeriesCollection) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each history without its last `horizon` values, and those values: the histories and actuals
    a task scores its validation forecasts on (`collection_scores(..., actuals=, histories=)`)."""
    horizon = collection.horizon
    for series_id, history in zip(collection.ids, collection.history):
        if len(history) <= horizon:
            raise FptError(
                f"series {series_id!r} of {collection.name!r} has {len(history)} values, not more than the "
                f"horizon {horizon}, so none is left to forecast from; drop it or lower the horizon"
            )
    return [h[:-horizon] for h in collection.history], [h[-horizon:] for h in collection.history]


def _targets(collection: SeriesCollection, actuals, histories) -> tuple[list, list]:
    if actuals is None:
        if collection.future is None:
            raise FptError(
                f"collection {collection.name!r} has no known future; pass actuals= (the validation "
                "horizon: histories, actuals = validation_split(collection))"
            )
        actuals = collection.future
    histories = collection.history if histories is None else histories
    for what, given in (("actuals", actuals), ("histories", histories)):
        if len(given) != len(collection):
            raise FptError(
                f"{len(given)} {what} for the {len(collection)} series of {collection.name!r}; give one per series"
            )
    return list(actuals), list(histories)


def _per_series(collection, forecasts, actuals, histories, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Each series' sMAPE and MASE, refusing a forecast that does not fit its series in one line."""
    if len(forecasts) != len(collection):
        raise FptError(
            f"{len(forecasts)} {what} for the {len(collection)} series of {collection.name!r}; give one per series"
        )
    smapes, mases = np.empty(len(collection)), np.empty(len(collection))
    for i, (series_id, forecast, actual, history) in enumerate(zip(collection.ids, forecasts, actuals, histories)):
        try:
            smapes[i] = smape(actual, forecast)
            mases[i] = mase(actual, forecast, history, collection.period)
        except FptError as e:
            raise FptError(f"series {series_id!r} of {collection.name!r}, {what}: {e}") from None
    return smapes, mases


def _mean_mase(mases: np.ndarray) -> float:
    kept = mases[np.isfinite(mases)]
    return float(kept.mean()) if len(kept) else float("nan")


def _owa(scores: dict) -> float:
    """M4's OWA; NaN, not a division by zero, where Naive2 is perfect (a mean error of 0)."""
    if not (scores["smape_naive2"] > 0 and scores["mase_naive2"] > 0):
        return float("nan")
    return 0.5 * (scores["smape"] / scores["smape_naive2"] + scores["mase"] / scores["mase_naive2"])


def collection_scores(
    collection: SeriesCollection,
    forecasts,
    naive2_forecasts=None,
    *,
    actuals=None,
    histories=None,
) -> dict:
    """Score one forecast per series over a collection, the way M4 scored a method.

    forecasts: one array per series, in `collection.ids` order, as long as its actuals. The actuals
    are `collection.future` and the MASE scales come from `collection.history`, unless `actuals=` and
    `histories=` are given (a validation horizon: `validation_split(collection)` makes both).
    Returns {"series": n, "smape": mean sMAPE (%), "mase": mean MASE over the series whose scale is
    not zero, "mase_left_out": how many were left out}; with `naive2_forecasts` (made with the same
    histories) also "smape_naive2", "mase_naive2" and M4's "owa" = (sMAPE / sMAPE_Naive2 +
    MASE / MASE_Naive2) / 2, ratios of the collection-level means (NaN where Naive2's error is 0).
    """
    actuals, histories = _targets(collection, actuals, histories)
    smapes, mases = _per_series(collection, forecasts, actuals, histories, "forecasts")
    scores = {
        "series": len(collection),
        "smape": float(smapes.mean()) if len(smapes) else float("nan"),
        "mase": _mean_mase(mases),
        "mase_left_out": int((~np.isfinite(mases)).sum()),
    }
    if naive2_forecasts is not None:
        smapes2, mases2 = _per_series(collection, naive2_forecasts, actuals, histories, "Naive2 forecasts")
        scores["smape_naive2"] = float(smapes2.mean()) if len(smapes2) else float("nan")
        scores["mase_naive2"] = _mean_mase(mases2)  # the same series left out: the scale is the history's
        scores["owa"] = _owa(scores)
    return scores
