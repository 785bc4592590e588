"""fpt.serve.forecaster: FPTForecaster as an sktime forecaster (the `tiny-random` backbone: offline, random init)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from helpers import raises_naming

pytest.importorskip("sktime")

from sktime.forecasting.base import ForecastingHorizon  # noqa: E402
from sktime.forecasting.model_evaluation import evaluate  # noqa: E402
from sktime.split import ExpandingWindowSplitter  # noqa: E402

from fpt import FPTForecaster  # noqa: E402
from fpt.backbones import load_backbone  # noqa: E402
from fpt.serve.estimators import FPTInputError  # noqa: E402

# A few steps of the tiny random GPT-2, every weight trained: these tests check the forecaster's contract, not
# what a frozen pretrained body does on these series.
TINY = {"backbone": "tiny-random", "init": "random", "steps": 30, "batch_size": 16, "policy": "full", "lr": 1e-2}


def monthly(values, start: str = "2000-01") -> pd.Series:
    return pd.Series(np.asarray(values, dtype=float), index=pd.period_range(start, periods=len(values), freq="M"))


def seasonal(n: int, level: float = 100.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return level + 0.5 * t + 10 * np.sin(2 * np.pi * t / 12) + rng.normal(0, 2, n)


@pytest.mark.slow
@pytest.mark.parametrize("params", FPTForecaster.get_test_params(), ids=["frozen", "every-weight"])
def test_sktime_check_estimator_passes_offline(params):
    # all of sktime's checks for a forecaster, on each get_test_params instance (one test each, so that two
    # workers share them): 445 each, about 650 fits in all, one step apiece
    from sktime.utils.estimator_checks import check_estimator

    results = check_estimator(FPTForecaster(**params), raise_exceptions=False, verbose=False)
    failed = {name: str(result)[:300] for name, result in results.items() if result != "PASSED"}
    assert len(results) > 400 and not failed


def test_fit_predict_one_series_in_its_own_index_and_units():
    y = monthly(seasonal(60, level=5_000.0))
    forecaster = FPTForecaster(**TINY).fit(y, fh=[1, 2, 3, 4, 5, 6])
    predicted = forecaster.predict()
    assert isinstance(predicted, pd.Series) and list(predicted.index.astype(str)) == [
        "2005-01",
        "2005-02",
        "2005-03",
        "2005-04",
        "2005-05",
        "2005-06",
    ]
    assert abs(predicted.mean() - y[-12:].mean()) < 0.1 * y[-12:].mean()  # un-scaled: in the series' units
    assert forecaster.horizon_ == 6 and forecaster.residuals_.shape == (7, 6)  # 7 held-out origins, 6 steps
    # fewer steps than fitted: the same forecasts, selected
    again = forecaster.predict(fh=[2, 5])
    assert np.allclose(again.to_numpy(), predicted.to_numpy()[[1, 4]])


def test_a_dataframe_is_one_global_model_and_a_panel_forecasts_past_each_series_end():
    frame = pd.DataFrame(
        {"a": seasonal(48, level=1e3), "b": seasonal(48, level=10.0, seed=1)}, index=monthly(range(48)).index
    )
    forecaster = FPTForecaster(**TINY).fit(frame, fh=[1, 2, 3])
    predicted = forecaster.predict()
    assert list(predicted.columns) == ["a", "b"] and predicted.shape == (3, 2)
    assert forecaster.residuals_.shape == (2 * 4, 3)  # both columns' held-out windows calibrate one model
    assert predicted["a"].mean() > 10 * predicted["b"].mean()  # each column in its own units (about 1,024 and 34)
    # a panel of two instances of different lengths: each continued from its own last month
    rows = [("x", p, v) for p, v in zip(pd.period_range("2000-01", periods=40, freq="M"), seasonal(40))]
    rows += [("y", p, v) for p, v in zip(pd.period_range("2000-01", periods=30, freq="M"), seasonal(30, seed=2))]
    panel = pd.DataFrame(rows, columns=["id", "month", "value"]).set_index(["id", "month"])
    forecasts = FPTForecaster(**TINY).fit(panel, fh=[1, 2]).predict()
    assert [(i, str(m)) for i, m in forecasts.index] == [
        ("x", "2003-05"),
        ("x", "2003-06"),
        ("y", "2002-07"),
        ("y", "2002-08"),
    ]


def test_intervals_widen_with_the_coverage_asked_and_hold_the_forecast():
    frame = pd.DataFrame({f"s{i}": seasonal(60, seed=i) for i in range(4)}, index=monthly(range(60)).index)
    forecaster = FPTForecaster(**TINY).fit(frame, fh=[1, 2, 3])
    intervals = forecaster.predict_interval(coverage=[0.5, 0.8, 0.95])
    point = forecaster.predict()
    widths = {c: (intervals[("s0", c, "upper")] - intervals[("s0", c, "lower")]).to_numpy() for c in (0.5, 0.8, 0.95)}
    assert (widths[0.5] <= widths[0.8]).all() and (widths[0.8] <= widths[0.95]).all()
    assert (widths[0.5] < widths[0.95]).all()  # 16 residuals a step: the 50% and 95% ranks differ
    middle = (intervals[("s0", 0.8, "upper")] + intervals[("s0", 0.8, "lower")]) / 2
    assert np.allclose(middle.to_numpy(), point["s0"].to_numpy())  # symmetric about the forecast
    quantiles = forecaster.predict_quantiles(alpha=[0.05, 0.5, 0.95])
    assert np.allclose(quantiles[("s0", 0.5)].to_numpy(), point["s0"].to_numpy())
    ninety = forecaster.predict_interval(coverage=0.9)
    assert np.allclose(quantiles[("s0", 0.95)].to_numpy(), ninety[("s0", 0.9, "upper")].to_numpy())


def test_evaluate_with_an_expanding_window_splitter():
    y = monthly(seasonal(60))
    cv = ExpandingWindowSplitter(fh=[1, 2, 3], initial_window=36, step_length=6)
    results = evaluate(FPTForecaster(**TINY), cv, y, return_data=True)
    assert len(results) == cv.get_n_splits(y) == 4
    assert np.isfinite(results["test_MeanAbsolutePercentageError"]).all()
    assert [len(p) for p in results["y_pred"]] == [3, 3, 3, 3]


def test_a_further_fh_than_fitted_is_refused_naming_the_fix():
    forecaster = FPTForecaster(**TINY).fit(monthly(seasonal(40)), fh=[1, 2, 3])
    with pytest.raises(ValueError, match=r"fh reaches 6 steps ahead.*fitted to forecast 3.*horizon=6"):
        forecaster.predict(fh=[1, 6])
    longer = FPTForecaster(**{**TINY, "horizon": 6}).fit(monthly(seasonal(40)), fh=[1, 2, 3])
    assert len(longer.predict(fh=ForecastingHorizon([6]))) == 1  # horizon=6 trains for 6 steps


@pytest.mark.parametrize(
    "y, fh, names",
    [
        (pd.Series(list("abcdefghijklmnopqrst")), [1], ("not numbers", "pd.to_numeric")),
        (monthly([1.0, 2.0, np.nan] + [3.0] * 30), [1], ("1 missing or infinite values", "2000-03", "Imputer")),
        (monthly([1.0, np.inf] + [3.0] * 30), [1], ("missing or infinite", "Imputer")),
        (monthly([1.0, 1e39] + [3.0] * 30), [1], ("beyond float32", "rescale")),
        (monthly(seasonal(15)), [1, 2, 3, 4, 5, 6], ("15 observations", "horizon of 6", "at least 19", "shorter fh")),
    ],
    ids=["text", "nan", "inf", "float32", "too-short"],
)
def test_bad_series_are_one_value_error_naming_the_fix(y, fh, names):
    forecaster = FPTForecaster(**TINY)
    message = raises_naming(lambda: forecaster.fit(y, fh=fh), *names)
    with pytest.raises(ValueError):
        forecaster.fit(y, fh=fh)
    assert len(message) < 300


def test_bad_parameters_and_the_tiny_backbone_without_random_init():
    y = monthly(seasonal(40))
    with pytest.raises(FPTInputError, match="^steps must be a whole number of at least 1, got 0$"):
        FPTForecaster(**{**TINY, "steps": 0}).fit(y, fh=[1])
    with pytest.raises(FPTInputError, match="^init must be one of pretrained, random"):
        FPTForecaster(**{**TINY, "init": "noise"}).fit(y, fh=[1])
    with pytest.raises(ValueError, match="^horizon must be a whole number"):
        FPTForecaster(**{**TINY, "horizon": 0}).fit(y, fh=[1])
    with pytest.raises(ValueError, match="give fit an fh, or horizon=N"):
        FPTForecaster(**TINY).fit(y)
    raises_naming(lambda: load_backbone("tiny-random"), "no pretrained weights", "--init random")


def test_update_reads_the_new_observations_and_trains_again_only_when_asked():
    y = monthly(seasonal(52))
    forecaster = FPTForecaster(**TINY).fit(y[:40], fh=[1, 2])
    first = forecaster.model_
    before = forecaster.predict()
    forecaster.update(y[40:48], update_params=False)
    after = forecaster.predict()
    assert forecaster.model_ is first and [str(p) for p in after.index] == ["2004-01", "2004-02"]
    assert not np.allclose(after.to_numpy(), before.to_numpy())  # the look-back now ends at 2003-12
    forecaster.update(y[48:], update_params=True)
    assert forecaster.model_ is not first and forecaster.horizon_ == 2  # trained again, at the fitted horizon
    assert [str(p) for p in forecaster.predict().index] == ["2004-05", "2004-06"]
