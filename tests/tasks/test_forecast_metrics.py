"""The competitions' metrics over collections of series (fpt.tasks.forecast_metrics): sMAPE and MASE
against hand-computed values, M4's Naive2 and seasonality test, and collection-level scores and OWA."""

import math

import numpy as np
import pytest
from helpers import raises_naming

from fpt.data.collection import SeriesCollection
from fpt.tasks.forecast_metrics import collection_scores, is_seasonal, mase, naive2, smape, validation_split

PATTERN = np.array([0.7, 1.3, 1.1, 0.9])  # multiplicative seasonal indices, mean 1


def seasonal_series(n: int = 48, seed: int = 0) -> np.ndarray:
    """A trending level times a strong period-4 pattern, with 1% noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return (100 + 0.5 * t) * PATTERN[t % 4] * (1 + 0.01 * rng.normal(size=n))


def test_smape_by_hand():
    # 200*10/210 and 200*20/380
    assert smape([100, 200], [110, 180]) == pytest.approx((2000 / 210 + 4000 / 380) / 2)
    assert smape([-1.0], [1.0]) == pytest.approx(200.0)  # |y| + |f|, not y + f
    assert smape([5, 5], [5, 5]) == 0.0


def test_smape_counts_a_zero_over_zero_step_as_perfect():
    assert smape([0.0, 0.0], [0.0, 0.0]) == 0.0
    assert smape([0.0, 1.0], [0.0, 3.0]) == pytest.approx((0 + 200 * 2 / 4) / 2)


def test_mase_period_1_by_hand():
    # in-sample naive errors |3-1|, |2-3|, |5-2|: mean 2; forecast errors 1 and 2: mean 1.5
    assert mase([6, 7], [5, 5], [1, 3, 2, 5], 1) == pytest.approx(0.75)


def test_mase_period_4_by_hand():
    # lag-4 errors |12-10|, |24-20|, |33-30|, |44-40|: mean 3.25; forecast errors 3 and 0
    history = [10, 20, 30, 40, 12, 24, 33, 44]
    assert mase([11, 22], [14, 22], history, 4) == pytest.approx(1.5 / 3.25)


def test_mase_uses_lag_1_when_the_history_is_not_longer_than_the_period():
    # lag-1 errors 1, 2: mean 1.5
    assert mase([5], [2], [1, 2, 4], 4) == pytest.approx(3 / 1.5)
    assert mase([5], [2], [1, 2, 4, 8], 4) == pytest.approx(3 / (7 / 3))


def test_mase_of_a_constant_history_is_nan_not_a_division_by_zero():
    assert math.isnan(mase([1.0], [2.0], [5.0, 5.0, 5.0], 1))
    assert math.isnan(mase([1.0], [2.0], [5.0], 1))  # no in-sample error at all


def test_is_seasonal_follows_m4s_test():
    assert is_seasonal(seasonal_series(), 4)
    assert not is_seasonal(np.random.default_rng(1).normal(size=48), 4)
    assert not is_seasonal(seasonal_series(), 1)
    assert not is_seasonal(seasonal_series(11), 4)  # fewer than 3 periods
    assert not is_seasonal(np.full(48, 3.0), 4)


def test_naive2_reproduces_the_seasonal_pattern():
    history = seasonal_series(50)  # ends on position 49 % 4 = 1: not a whole number of cycles
    forecast = naive2(history, 8, 4)
    upcoming = PATTERN[np.arange(50, 58) % 4]
    np.testing.assert_allclose(forecast / forecast.mean(), upcoming / upcoming.mean(), rtol=0.03)
    level = history[-1] / PATTERN[1]
    np.testing.assert_allclose(forecast, level * upcoming, rtol=0.03)


def test_naive2_of_a_non_seasonal_series_is_its_last_value():
    history = 50 + np.random.default_rng(2).normal(size=40).cumsum()
    assert not is_seasonal(history, 4)
    np.testing.assert_array_equal(naive2(history, 5, 4), np.full(5, history[-1]))
    np.testing.assert_array_equal(naive2(seasonal_series(), 3, 1), np.full(3, seasonal_series()[-1]))
    short = seasonal_series(8)  # seasonal, but under 3 periods: not tested, so plain naive
    np.testing.assert_array_equal(naive2(short, 3, 4), np.full(3, short[-1]))


def collection(future: bool = True) -> SeriesCollection:
    rng = np.random.default_rng(3)
    histories = [seasonal_series(40, seed) for seed in range(3)] + [np.full(12, 7.0)]
    futures = [h[-4:] * (1 + 0.05 * rng.normal(size=4)) for h in histories]
    return SeriesCollection("toy", ["s1", "s2", "s3", "flat"], histories, 4, 4, futures if future else None)


def test_collection_scores_are_means_over_series_and_count_the_left_out():
    toy = collection()
    forecasts = [h[-4:] for h in toy.history]  # seasonal naive
    scores = collection_scores(toy, forecasts)
    smapes = [smape(a, f) for a, f in zip(toy.future, forecasts)]
    mases = [mase(a, f, h, 4) for a, f, h in zip(toy.future, forecasts, toy.history)]
    assert scores["series"] == 4
    assert scores["smape"] == pytest.approx(np.mean(smapes))
    assert scores["mase_left_out"] == 1  # the flat history: no scale
    assert scores["mase"] == pytest.approx(np.mean(mases[:3]))
    assert "owa" not in scores


def test_owa_of_naive2_against_itself_is_one_and_a_better_method_scores_below():
    toy = collection()
    baseline = [naive2(h, 4, 4) for h in toy.history]
    assert collection_scores(toy, baseline, baseline)["owa"] == pytest.approx(1.0)
    assert collection_scores(toy, toy.future, baseline)["owa"] == 0.0


def test_a_validation_horizon_is_scored_with_explicit_actuals_and_histories():
    toy = collection(future=False)
    histories, actuals = validation_split(toy)
    assert [len(h) for h in histories] == [36, 36, 36, 8]
    np.testing.assert_array_equal(actuals[0], toy.history[0][-4:])
    forecasts = [np.full(4, h[-1]) for h in histories]
    scores = collection_scores(toy, forecasts, actuals=actuals, histories=histories)
    assert scores["smape"] == pytest.approx(np.mean([smape(a, f) for a, f in zip(actuals, forecasts)]))
    assert scores["mase"] == pytest.approx(
        np.mean([mase(a, f, h, 4) for a, f, h in zip(actuals, forecasts, histories)][:3])
    )


def test_mistakes_are_one_line_naming_the_fix():
    toy = collection()
    forecasts = [h[-4:] for h in toy.history]
    raises_naming(lambda: collection_scores(collection(future=False), forecasts), "actuals=", "validation_split")
    raises_naming(lambda: collection_scores(toy, forecasts[:3]), "3 forecasts", "4 series")
    raises_naming(lambda: collection_scores(toy, forecasts[:3] + [np.ones(5)]), "'flat'", "5 values")
    raises_naming(lambda: collection_scores(toy, forecasts[:3] + [np.array([1, 2, np.nan, 4])]), "'flat'", "NaN")
    raises_naming(lambda: mase([1], [1], [1, 2], 0), "period", "at least 1")
    raises_naming(lambda: validation_split(SeriesCollection("c", ["x"], [np.ones(4)], 4, 1)), "'x'", "horizon 4")
