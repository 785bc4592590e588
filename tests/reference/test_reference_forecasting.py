"""The classical baselines over a collection (fpt.reference.classical): statsforecast's models and
Naive2, kept in the collection's order, never stopped by a short series, and scored against Naive2."""

import sys

import numpy as np
import pytest
from helpers import raises_naming

from fpt.data.collection import SeriesCollection
from fpt.reference.classical import BASELINES, baseline_forecasts, baseline_scores

pytest.importorskip("statsforecast")


def unsorted_collection(horizon: int = 6) -> SeriesCollection:
    """Three series whose ids statsforecast would sort differently (zeta, a10, a2), each with its own
    level so that a mix-up shows."""
    rng = np.random.default_rng(0)
    t = np.arange(30)
    histories = [
        200 + 20 * np.sin(2 * np.pi * t / 4) + rng.normal(size=30),
        10 + rng.normal(size=24).cumsum() * 0.1,
        50 + 0.5 * np.arange(17) + rng.normal(size=17),
    ]
    futures = [h[-horizon:] + 1 for h in histories]
    return SeriesCollection("toy", ["zeta", "a10", "a2"], histories, horizon, 4, futures)


def test_shapes_and_the_collections_order_are_kept():
    toy = unsorted_collection()
    forecasts = baseline_forecasts(toy)
    assert list(forecasts) == list(BASELINES)
    for name, per_series in forecasts.items():
        assert len(per_series) == 3, name
        for forecast in per_series:
            assert forecast.shape == (6,) and forecast.dtype == np.float64 and np.isfinite(forecast).all(), name
    for history, forecast in zip(toy.history, forecasts["Naive"]):
        np.testing.assert_array_equal(forecast, np.full(6, history[-1]))
    # the seasonal series' forecasts stay near its level of 200, the others near theirs
    for name in ("Theta", "AutoETS"):
        assert abs(forecasts[name][0].mean() - 200) < 15 and forecasts[name][1].mean() < 30, name


def test_seasonal_naive_repeats_the_last_season():
    toy = unsorted_collection()
    forecast = baseline_forecasts(toy, models=("SeasonalNaive",))["SeasonalNaive"]
    for history, predicted in zip(toy.history, forecast):
        np.testing.assert_array_equal(predicted, np.concatenate([history[-4:], history[-4:-2]]))


def test_histories_cut_short_are_forecast_from_where_they_end():
    toy = unsorted_collection()
    cut = [h[:-6] for h in toy.history]
    forecasts = baseline_forecasts(toy, models=("Naive", "Naive2"), histories=cut)
    for history, naive in zip(cut, forecasts["Naive"]):
        np.testing.assert_array_equal(naive, np.full(6, history[-1]))
    scores = baseline_scores(toy, forecasts, actuals=[h[-6:] for h in toy.history], histories=cut)
    assert scores["Naive2"]["owa"] == pytest.approx(1.0)


def test_a_very_short_series_does_not_stop_the_run():
    toy = unsorted_collection(horizon=3)
    toy.history[1], toy.future[1] = np.array([4.0, 5.0]), np.array([5.0, 6.0, 7.0])
    with pytest.warns(UserWarning, match="could not forecast 1 of the 3 series"):
        forecasts = baseline_forecasts(toy, models=BASELINES + ("AutoARIMA",))
    for name, per_series in forecasts.items():
        assert all(f.shape == (3,) and np.isfinite(f).all() for f in per_series), name
    for name in ("SeasonalNaive", "Theta", "AutoETS"):  # too short for them: the last value
        np.testing.assert_array_equal(forecasts[name][1], np.full(3, 5.0))
    scores = baseline_scores(toy, forecasts)
    assert set(scores) == set(forecasts) and scores["Naive2"]["owa"] == pytest.approx(1.0)


def test_without_statsforecast_the_message_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "statsforecast", None)
    toy = unsorted_collection()
    raises_naming(lambda: baseline_forecasts(toy), "statsforecast", 'pip install "fpt[forecasting]"')
    naive2_only = baseline_forecasts(toy, models=("Naive2",))  # M4's own: no statsforecast needed
    assert len(naive2_only["Naive2"]) == 3


def test_mistakes_are_one_line_naming_the_fix():
    toy = unsorted_collection()
    raises_naming(lambda: baseline_forecasts(toy, models=("Prophet",)), "'Prophet'", "AutoETS")
    raises_naming(lambda: baseline_forecasts(toy, histories=toy.history[:2]), "2 histories", "3 series")
    twice = SeriesCollection("dup", ["x", "x"], toy.history[:2], 6, 4)
    raises_naming(lambda: baseline_forecasts(twice), "'x'", "its own id")
    gap = SeriesCollection("gap", ["g"], [np.array([1.0, np.nan, 3.0])], 2, 1)
    raises_naming(lambda: baseline_forecasts(gap), "'g'", "finite")
