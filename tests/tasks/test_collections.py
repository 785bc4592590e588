"""fpt.tasks.collections: one model over many series of different lengths (M3, a long-format table):
splits by time per series, windows scaled on their look-back, forecasts scored in the series' own units
(sMAPE, MASE, OWA) and, at the end of a run, beside the classical baselines on the same split."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import one_line_error, write_panel_csv

from fpt.cli import main
from fpt.core.errors import FptError
from fpt.data.collection import SeriesCollection, cut_collection
from fpt.tasks.collections import build_collection_task, choose_windows, window_scale


def _collection(lengths=(40, 9, 60), horizon=4, future=True, seed=0) -> SeriesCollection:
    """Seasonal random walks far from 0, one per length; with `future`, a competition's test horizon."""
    rng = np.random.default_rng(seed)
    series = []
    for i, n in enumerate(lengths):
        total = n + (horizon if future else 0)
        level = 100.0 * (i + 1) + np.cumsum(rng.normal(size=total))
        series.append(level + 5 * np.sin(np.arange(total) * 2 * np.pi / 4))
    history = [s[:n] for s, n in zip(series, lengths)]
    return SeriesCollection(
        name="toy",
        ids=[f"s{i}" for i in range(len(lengths))],
        history=history,
        horizon=horizon,
        period=4,
        future=[s[n:] for s, n in zip(series, lengths)] if future else None,
    )


@pytest.mark.parametrize("future", [True, False])
def test_no_training_target_reaches_validation_and_validation_precedes_test(future):
    collection = _collection(future=future)
    task = build_collection_task(collection, lookback=8, patch_size=4, patch_stride=2)
    horizon = collection.horizon
    for i, history in enumerate(collection.history):
        test_cut = len(history) if future else len(history) - horizon
        assert task.cuts["test"][i] == test_cut and task.cuts["val"][i] == test_cut - horizon
    train = task.train
    for series, cut in zip(train.series.tolist(), train.cut.tolist()):
        assert cut >= 1 and cut + horizon <= task.cuts["val"][series]
    # every cut point of every series is a training window
    assert len(train) == sum(max(0, task.cuts["val"][i] - horizon) for i in range(len(collection)))
    actual = task.split_actuals("test")
    expected = collection.future if future else [h[-horizon:] for h in collection.history]
    for a, b in zip(actual, expected):
        np.testing.assert_array_equal(a, b)
    assert len(task.evals["val"]) == len(task.evals["test"]) == len(collection)


def test_a_short_look_back_is_padded_with_the_series_first_value():
    collection = _collection(lengths=(9,), horizon=4)
    task = build_collection_task(collection, lookback=8, patch_size=4, patch_stride=2)
    x, y = task.evals["val"].raw(torch.tensor([0]))  # val cut at 5: five observations, three padded
    history = collection.history[0]
    np.testing.assert_array_equal(x[0].numpy(), [history[0]] * 3 + list(history[:5]))
    np.testing.assert_array_equal(y[0].numpy(), history[5:9])


def test_windows_are_scaled_on_their_look_back_and_scaled_back_exactly():
    collection = _collection()
    task = build_collection_task(collection, lookback=8, patch_size=4, patch_stride=2)
    batch = task.make_batch(task.evals["test"], torch.arange(3), None)
    assert batch.x.dtype == torch.float32 and batch.x.shape == (3, 8) and batch.y.shape == (3, 4)
    assert batch.x.mean(1).abs().max() < 1e-5  # each look-back centred on its own mean
    back = task.unscale("test", batch.y)  # the true targets, scaled, come back in the series' units
    for a, b in zip(back, collection.future):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    flat = torch.full((1, 8), 250.0)
    mean, scale = window_scale(flat)  # a flat look-back is scaled by a share of its level, not by 0
    assert mean.item() == 250.0 and scale.item() == pytest.approx(25.0)


def test_perfect_forecasts_score_zero_and_naive2_scores_an_owa_of_one():
    collection = _collection()
    task = build_collection_task(collection, lookback=8, patch_size=4, patch_stride=2)
    perfect = task.make_batch(task.evals["test"], torch.arange(3), None).y
    scores = task.series_scores("test", perfect)
    assert scores["smape"] == pytest.approx(0.0, abs=1e-4) and scores["mase"] == pytest.approx(0.0, abs=1e-4)
    assert scores["series"] == 3


def test_look_back_and_patches_are_chosen_from_the_data_and_said():
    collection = _collection(lengths=(60, 70, 80), horizon=6)  # the median series trains on 70 - 6 - 6
    lookback, patch, stride, said = choose_windows(collection, None, None, None)
    assert lookback == 30 and patch == 6 and stride == 3  # 5 x the horizon fits 58
    assert "look-back 30 (5 x the horizon 6" in said and "patches of 6" in said
    short = _collection(lengths=(14, 15, 16), horizon=6)  # yearly M3: 14 observations
    assert choose_windows(short, None, None, None)[0] == 6
    assert choose_windows(collection, 12, 4, 4)[:3] == (12, 4, 4)  # given ones are kept
    assert choose_windows(collection, 12, 4, 4)[3] == ""


def test_a_series_too_short_for_validation_and_test_is_one_line():
    collection = _collection(lengths=(40, 4), horizon=4)  # the second has no room for a validation horizon
    with pytest.raises(FptError, match="series 's1' has 4 observations, too few"):
        build_collection_task(collection, lookback=8, patch_size=4, patch_stride=2)


def _train(tiny_gpt2, tmp_path, *extra) -> tuple[int, str]:
    write_panel_csv(tmp_path / "sales.csv")  # shop3: too short for a horizon of 6
    argv = ["train", "--task", f"panel:{tmp_path / 'sales.csv'}", "--horizon", "6", "--backbone", tiny_gpt2]
    argv += ["--steps", "4", "--batch-size", "8", "--eval-every", "2", "--no-progress", "--out", str(tmp_path / "run")]
    return main([*argv, *extra])


def test_a_panel_trains_and_is_scored_beside_the_baselines_on_the_same_split(tiny_gpt2, tmp_path, capsys):
    pytest.importorskip("statsforecast")
    assert _train(tiny_gpt2, tmp_path) == 0
    out, err = capsys.readouterr()
    assert "look-back 30 (5 x the horizon 6" in out and "chosen from the data" in out  # said first
    assert "1 series shorter than 13 observations left out (first: shop3)" in err
    assert "test MSE" in out and "sMAPE" in out and "OWA" in out
    assert "baselines on the same test split" in out and "Theta: sMAPE" in out and "AutoETS: sMAPE" in out
    assert ("beats fpt on this split" in out) != ("fpt beats every baseline" in out)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    test = summary["test"]["test"]
    assert test["series"] == 3 and np.isfinite(test["smape"]) and np.isfinite(test["mase"])
    beside = summary["baselines"]
    assert beside["split"] == "test" and {"Naive", "SeasonalNaive", "Naive2", "Theta", "AutoETS"} <= set(
        beside["scores"]
    )
    assert beside["scores"]["Naive2"]["owa"] == pytest.approx(1.0)
    intervals = summary["intervals"]  # split conformal on validation, its coverage checked on test
    assert set(intervals["halfwidths"]) == {"80", "95"} and len(intervals["halfwidths"]["80"]) == 6
    assert all(0 <= c <= 1 for c in intervals["test_coverage"].values())
    assert "intervals (split conformal on validation): 80% cover" in out
    notes = summary["task_notes"]
    assert notes["series"] == 3 and notes["horizon"] == 6 and notes["period"] == 12
    # validation: the sMAPE of every evaluation is in metrics.jsonl, on the val split
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["split"] == "val" and "smape" in r for r in records)


def test_predict_continues_every_series_on_its_calendar_in_its_units(tiny_gpt2, tmp_path, capsys):
    from fpt.tasks.collections import window_scale
    from fpt.training.lifecycle import load_run

    assert _train(tiny_gpt2, tmp_path, "--no-baselines") == 0
    out = tmp_path / "future.csv"
    assert main(["predict", str(tmp_path / "run"), "--input", str(tmp_path / "sales.csv"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "forecasts of 6 steps for 4 series (shop0: 2019-01-01 to 2019-06-01)" in printed
    assert "1 series too short to forecast left out (first: shop3)" not in printed  # 10 > 6: it is forecast
    rows = [line.split(",") for line in out.read_text().splitlines()]
    assert rows[0] == ["unique_id", "ds", "fpt", "fpt-lo-80", "fpt-hi-80", "fpt-lo-95", "fpt-hi-95"]
    assert len(rows) == 1 + 4 * 6
    for row in rows[1:]:  # the intervals the run recorded, nested around the forecast
        lo95, lo80, point, hi80, hi95 = (float(row[i]) for i in (5, 3, 2, 4, 6))
        assert lo95 <= lo80 <= point <= hi80 <= hi95
    assert [r[1] for r in rows[1:7]] == [f"2019-0{m}-01" for m in range(1, 7)]  # month starts, not 31-day steps
    assert (tmp_path / "future.csv.png").read_bytes()[:4] == b"\x89PNG"
    # by hand: shop0's last 30 values, scaled on themselves, through the model, scaled back
    _, task, model, _ = load_run(tmp_path / "run")
    lines = (tmp_path / "sales.csv").read_text().splitlines()[1:]
    shop0 = torch.tensor(
        [float(line.split(",")[2]) for line in lines if line.startswith("shop0,")], dtype=torch.float64
    )
    x = shop0[-task.notes["lookback"] :][None]
    mean, scale = window_scale(x)
    model.eval()
    with torch.no_grad():
        by_hand = model(((x - mean) / scale).float()).reshape(1, -1).double() * scale + mean
    written = np.array([float(r[2]) for r in rows[1:7]])
    np.testing.assert_allclose(written, by_hand[0].numpy(), rtol=1e-5)


def test_conformal_half_widths_are_the_finite_sample_quantile_of_absolute_residuals():
    from fpt.training.intervals import conformal_halfwidths

    residuals = torch.tensor([[-1.0, 10.0], [2.0, -20.0], [-3.0, 30.0], [4.0, -40.0]])  # 4 series, 2 steps
    widths = conformal_halfwidths(residuals, levels=(50, 80, 95))
    assert widths[50] == [3.0, 30.0]  # ceil(5 x 0.5) = 3rd smallest |residual| of each step
    assert widths[80] == widths[95] == [4.0, 40.0]  # ceil(5 x 0.8) = 4: the largest


@pytest.mark.parametrize("subset, scored", [("1000", True), ("2", False)])
def test_an_eval_subset_that_holds_every_series_is_scored_in_their_units(tiny_gpt2, tmp_path, subset, scored):
    # the fast recipe evaluates a subset between the whole split's evaluations: one holding every series'
    # window is the whole split, and gets its sMAPE; a smaller one cannot (the forecasts of some are missing)
    assert _train(tiny_gpt2, tmp_path, "--no-baselines", "--eval-subset", subset, "--steps", "6") == 0
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    middle = [r for r in records if r["step"] < 6]
    assert middle and all(("smape" in r) == scored for r in middle)
    assert all(r["split"] == ("val" if scored else "val[:2]") for r in middle)
    assert "smape" in records[-1]  # the last evaluation scores the whole split


def test_no_baselines_leaves_them_out(tiny_gpt2, tmp_path, capsys):
    assert _train(tiny_gpt2, tmp_path, "--no-baselines") == 0
    assert "baselines on the same" not in capsys.readouterr().out
    assert "baselines" not in json.loads((tmp_path / "run" / "summary.json").read_text())


def test_a_panel_without_a_horizon_is_one_line(tiny_gpt2, tmp_path, capsys):
    write_panel_csv(tmp_path / "sales.csv")
    argv = ["train", "--task", f"panel:{tmp_path / 'sales.csv'}", "--backbone", tiny_gpt2, "--steps", "1"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    assert "needs --horizon" in one_line_error(capsys) and not (tmp_path / "run").exists()


def test_a_cutoff_drops_each_series_last_values_future_included_and_counts_those_left_too_short():
    collection = _collection(lengths=(40, 9, 60), horizon=4)  # a competition's: each with 4 future values
    task = build_collection_task(cut_collection(collection, 6), lookback=8, patch_size=4, patch_stride=2)
    known = [np.concatenate([h, f]) for h, f in zip(collection.history, collection.future)]
    assert task.collection.ids == ["s0", "s2"]  # s1: 13 - 6 = 7 left, under two horizons and one
    assert task.notes["skipped"] == {"count": 1, "ids": ["s1"], "min_length": 9, "cutoff": 6}
    for actual, val, values in zip(task.split_actuals("test"), task.split_actuals("val"), [known[0], known[2]]):
        np.testing.assert_array_equal(actual, values[-10:-6])  # the horizon before the last 6 known values
        np.testing.assert_array_equal(val, values[-14:-10])
    assert cut_collection(collection, 0) is collection
    with pytest.raises(FptError, match="--cutoff 56 leaves every series of toy shorter than 9 .* at most 55 fits"):
        cut_collection(collection, 56)
    with pytest.raises(FptError, match="--cutoff must be a whole number of observations, 0 or more, got -1"):
        cut_collection(collection, -1)
