"""The baselines and intervals of a forecast over one CSV's windows (`forecast:FILE.csv`, `ett`): statsforecast's
Naive, SeasonalNaive, Theta and AutoETS on exactly the test windows fpt is scored on, by the same MSE and MAE;
split conformal intervals per column and step, their test coverage, and `fpt predict`'s bounds in the file's units."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import sys

import numpy as np
import pytest
import torch
from helpers import ETT_COLUMNS, write_ett_csv, write_seasonal_csv

from fpt.cli import main
from fpt.models.baselines.forecast import NaiveForecast
from fpt.reference import windows
from fpt.reference.windows import WINDOW_BASELINES, window_baseline_scores
from fpt.tasks import create_task
from fpt.tasks.forecasting import ETT_HOURS, seasonal_period
from fpt.training.evaluation import evaluate
from fpt.training.lifecycle import load_run
from fpt.training.reference_scores import verdict

pytest.importorskip("statsforecast")

SMALL = dict(lookback=24, horizon=6, patch_size=8, patch_stride=4)
FLAGS = [f"--{key.replace('_', '-')}={value}" for key, value in SMALL.items()]
ROWS = 300  # 20% test: 60 rows, 55 windows x 2 columns


def _train(csv_path, out, backbone, *more) -> tuple[int, str]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = main(
            ["train", "--task", f"forecast:{csv_path}", *FLAGS, "--backbone", backbone, "--steps", "4"]
            + ["--batch-size", "8", "--eval-every", "2", "--no-progress", "--out", str(out), *more]
        )
    return status, printed.getvalue()


@pytest.fixture(scope="module")
def run(tiny_backbones, tmp_path_factory):
    folder = tmp_path_factory.mktemp("windows")
    write_seasonal_csv(folder / "series.csv", ROWS)
    status, printed = _train(folder / "series.csv", folder / "run", tiny_backbones["gpt2"])
    assert status == 0, printed
    return folder / "run", printed


def test_the_baselines_are_recorded_and_printed_beside_fpts_test_score(run):
    path, printed = run
    summary = json.loads((path / "summary.json").read_text())
    beside = summary["baselines"]
    assert beside["split"] == "test" and beside["metric"] == "mse"
    assert set(beside["scores"]) == set(WINDOW_BASELINES) and beside["methods"] == list(WINDOW_BASELINES)
    for name, scores in beside["scores"].items():
        assert set(scores) == {"mse", "mae"} and scores["mse"] > 0 and scores["mae"] > 0, name
    assert summary["task_notes"]["period"] == 24  # hourly rows: a day's cycle
    # a cycle of 24 hours repeats: SeasonalNaive all but removes it, Naive does not
    assert beside["scores"]["SeasonalNaive"]["mse"] < 0.5 * beside["scores"]["Naive"]["mse"]
    lines = printed.strip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("baselines on the same test split ("))
    assert [line.split(":")[0].strip() for line in lines[start + 1 : start + 5]] == list(WINDOW_BASELINES)
    assert lines[start + 1].startswith("  Naive: MSE ") and ", MAE " in lines[start + 1]
    assert lines[start + 5] == verdict(summary) and ("beats" in lines[start + 5] or "scores as" in lines[start + 5])


def test_naive_is_scored_on_the_same_windows_by_the_same_metric(run):
    path, _ = run
    summary = json.loads((path / "summary.json").read_text())
    task = load_run(path).task
    x, y = task.evals["test"].examples(torch.arange(len(task.evals["test"])))
    assert len(x) == (60 - 6 + 1) * 2 == summary["test"]["test"]["examples"]
    by_hand = (x[:, -1:].double() - y.double()).square().mean().item()
    recorded = summary["baselines"]["scores"]["Naive"]
    assert recorded["mse"] == pytest.approx(by_hand, rel=1e-12)
    assert recorded["mse"] == pytest.approx(evaluate(NaiveForecast(6), task, split="test")["mse"], rel=1e-12)
    assert recorded["mae"] == pytest.approx((x[:, -1:].double() - y.double()).abs().mean().item(), rel=1e-12)


def test_intervals_cover_part_of_test_and_widen_with_the_level(run):
    path, printed = run
    intervals = json.loads((path / "summary.json").read_text())["intervals"]
    assert intervals["columns"] == ["load", "temp"]
    for level in ("80", "95"):
        assert 0 <= intervals["test_coverage"][level] <= 1
        assert all(0 <= c[level] <= 1 for c in intervals["test_coverage_by_column"].values())
    narrow, wide = np.array(intervals["halfwidths"]["80"]), np.array(intervals["halfwidths"]["95"])
    assert narrow.shape == wide.shape == (2, 6)  # per column, per step ahead
    assert (wide >= narrow).all() and (wide > narrow).any() and (narrow > 0).all()
    assert intervals["test_coverage"]["95"] >= intervals["test_coverage"]["80"]
    assert "intervals (split conformal on validation): 80% cover " in printed


def test_evaluate_and_report_show_the_recorded_baselines(run, capsys):
    path, _ = run
    summary = json.loads((path / "summary.json").read_text())
    assert main(["evaluate", str(path), "--splits", "test"]) == 0
    out = capsys.readouterr().out
    assert "recorded when the run ended, baselines on the same test split" in out
    assert f"{verdict(summary)}\n" in out and "  AutoETS: MSE " in out
    # in the order they ran, not summary.json's sorted keys
    assert [out.index(f"  {name}: MSE ") for name in WINDOW_BASELINES] == sorted(
        out.index(f"  {name}: MSE ") for name in WINDOW_BASELINES
    )
    assert main(["report", str(path), "--out", str(path / "report.html")]) == 0
    page = (path / "report.html").read_text()
    assert "Beside the baselines" in page and "SeasonalNaive" in page and verdict(summary).split(" (")[0] in page


def test_predict_writes_each_columns_interval_in_the_files_units(run, tmp_path, capsys):
    path, _ = run
    dates, values = write_seasonal_csv(tmp_path / "recent.csv", 40, seed=5)
    out = tmp_path / "future.csv"
    assert main(["predict", str(path), "--input", str(tmp_path / "recent.csv"), "--out", str(out)]) == 0
    assert "80% and 95% intervals" in capsys.readouterr().out
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 6
    summary = json.loads((path / "summary.json").read_text())
    std = summary["task_notes"]["scaler_std"]
    for c, name in enumerate(["load", "temp"]):
        for level in ("80", "95"):
            lo = np.array([float(r[f"{name}-lo-{level}"]) for r in rows])
            hi = np.array([float(r[f"{name}-hi-{level}"]) for r in rows])
            mid = np.array([float(r[name]) for r in rows])
            assert (lo < mid).all() and (mid < hi).all()
            width = np.array(summary["intervals"]["halfwidths"][level][c]) * std[c]  # back in the file's units
            np.testing.assert_allclose(hi - mid, width, rtol=1e-5, atol=1e-6 * abs(mid).max())
        assert all(float(r[f"{name}-lo-95"]) <= float(r[f"{name}-lo-80"]) for r in rows)


def test_no_baselines_leaves_them_out_and_keeps_the_intervals(tiny_gpt2, tmp_path):
    write_seasonal_csv(tmp_path / "series.csv", ROWS)
    status, printed = _train(tmp_path / "series.csv", tmp_path / "run", tiny_gpt2, "--no-baselines")
    assert status == 0, printed
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert "baselines" not in summary and "intervals" in summary and "baselines on the same" not in printed


def test_without_statsforecast_the_run_ends_and_names_the_install(tiny_gpt2, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "statsforecast", None)  # not installed: its import fails
    write_seasonal_csv(tmp_path / "series.csv", ROWS)
    status, printed = _train(tmp_path / "series.csv", tmp_path / "run", tiny_gpt2)
    assert status == 0, printed
    beside = json.loads((tmp_path / "run" / "summary.json").read_text())["baselines"]
    assert beside["scores"] == {} and beside["missing"] == [
        'Naive, SeasonalNaive, Theta, AutoETS: pip install "fpt[forecasting]"'
    ]
    assert '  (left out: Naive, SeasonalNaive, Theta, AutoETS: pip install "fpt[forecasting]")' in printed
    assert "no baseline ran on this split" in printed


def test_a_model_too_slow_for_every_window_is_fitted_on_every_kth_and_weighed_there(run, monkeypatch):
    path, _ = run
    loaded = load_run(path)
    monkeypatch.setitem(windows.MAX_SERIES, "AutoETS", 30)  # 30 of 110 series: every 4th of 55 windows
    scores = window_baseline_scores(
        loaded.task,
        "test",
        ("Naive", "AutoETS"),
        fpt_on=lambda n: evaluate(loaded.model, loaded.task, split="test", limit=n),
    )
    assert "windows" not in scores["Naive"]
    assert scores["AutoETS"]["windows"] == "test[::4 windows]"
    mine = evaluate(loaded.model, loaded.task, split="test", limit=30)
    assert mine["split"] == "test[::4 windows]" and mine["examples"] == 14 * 2
    assert scores["AutoETS"]["fpt"] == {"mse": mine["mse"], "mae": mine["mae"]}


def _summary(fpt_whole: float, autoets: float, fpt_there: float) -> dict:
    scores = {
        "Naive": {"mse": 0.9, "mae": 0.7},
        "AutoETS": {"mse": autoets, "mae": 0.5, "windows": "test[::10 windows]", "fpt": {"mse": fpt_there, "mae": 0.5}},
    }
    return {
        "test": {"test": {"mse": fpt_whole, "mae": 0.5, "examples": 10}},
        "baselines": {"split": "test", "metric": "mse", "seconds": 1.0, "scores": scores, "missing": []},
    }


def test_the_verdict_weighs_a_baseline_fitted_on_some_windows_against_fpt_there():
    # AutoETS's 0.3 is below fpt's 0.4 over every window, but above fpt's 0.25 on the windows it was fitted on
    assert verdict(_summary(0.4, 0.3, 0.25)) == (
        "fpt beats every baseline on this split (MSE 0.2500 on test[::10 windows]; the best, AutoETS, 0.3000)"
    )
    assert verdict(_summary(0.2, 0.3, 0.35)) == (
        "AutoETS beats fpt on this split (MSE 0.3000 against fpt's 0.3500 on test[::10 windows])"
    )
    # the best is the one furthest below fpt's score on its own windows: Naive's 0.9 against 0.95 over all of them
    assert verdict(_summary(0.95, 0.3, 0.25)) == "Naive beats fpt on this split (MSE 0.9000 against fpt's 0.9500)"
    assert verdict(_summary(0.85, 0.3, 0.25)) == (
        "fpt beats every baseline on this split (MSE 0.8500; the best, Naive, 0.9000)"
    )


@pytest.mark.parametrize(
    "step, period",
    [
        (np.timedelta64(1, "h"), 24),
        (np.timedelta64(15, "m"), 96),
        (np.timedelta64(1, "D"), 7),
        (np.timedelta64(7, "D"), 52),
        (np.timedelta64(7, "m"), 1),
    ],
)
def test_the_season_comes_from_the_datas_step(step, period):
    dates = np.datetime64("2020-01-01T00:00:00") + np.arange(50) * step
    assert seasonal_period(dates) == period


def test_a_monthly_series_has_a_season_of_twelve():
    dates = np.arange("2000-01", "2010-01", dtype="datetime64[M]").astype("datetime64[s]")  # 28 to 31 days apart
    assert seasonal_period(dates) == 12


@pytest.mark.slow
def test_ett_records_the_baselines_and_intervals_on_its_protocol(tiny_gpt2, tmp_path, monkeypatch):
    write_ett_csv(tmp_path / "ETTh1.csv", hours=sum(ETT_HOURS.values()), seed=1)
    for model in ("Theta", "AutoETS"):  # the 2,857 test windows x 7: every k-th for the fitted models, as on ETTh1
        monkeypatch.setitem(windows.MAX_SERIES, model, 700)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        flags = ["--data-dir", str(tmp_path), *FLAGS, "--backbone", tiny_gpt2, "--steps", "2", "--eval-every", "2"]
        status = main(["train", "--task", "ett:ETTh1", *flags, "--no-progress", "--out", str(tmp_path / "run")])
    assert status == 0, printed.getvalue()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    scores = summary["baselines"]["scores"]
    assert "windows" not in scores["Naive"] and "windows" not in scores["SeasonalNaive"]
    assert scores["Theta"]["windows"] == scores["AutoETS"]["windows"] == "test[::29 windows]"
    task = create_task("ett:ETTh1", data_dir=str(tmp_path), **SMALL)
    assert task.notes["period"] == 24 and summary["intervals"]["columns"] == list(ETT_COLUMNS)
    assert "(fitted on test[::29 windows] only; fpt there: MSE " in printed.getvalue()
