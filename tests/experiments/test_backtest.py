"""fpt backtest: a collection run's recipe trained again at earlier forecast origins (the task option
`cutoff`), each origin's test horizon exactly the k-th block from the end of every series of the raw
table, scored beside the baselines at the same origin, with the mean over the origins."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from helpers import one_line_error, raises_naming

from fpt.cli import main
from fpt.tasks import create_task
from fpt.tasks.forecast_metrics import smape

HORIZON = 4
LENGTHS = {"a": 40, "b": 52, "c": 30, "d": 14}  # d: 14 - 2 x 4 = 6 left at origin 3, under 2 x 4 + 1: skipped


def _panel(path) -> dict[str, np.ndarray]:
    """A monthly long-format table, one seasonal random walk per series; the values as written."""
    rng = np.random.default_rng(3)
    series, lines = {}, ["unique_id,ds,y"]
    for i, (name, n) in enumerate(LENGTHS.items()):
        values = 80.0 * (i + 1) + np.cumsum(rng.normal(size=n)) + 5 * np.sin(np.arange(n) * 2 * np.pi / 12)
        dates = np.datetime64("2010-01") + np.arange(n)
        lines += [f"{name},{d}-01,{v!r}" for d, v in zip(dates, values.tolist())]
        series[name] = values
    path.write_text("\n".join(lines) + "\n")
    return series


def _train(backbone, table, out, *more) -> int:
    argv = ["train", "--task", f"panel:{table}", "--horizon", str(HORIZON), "--backbone", backbone]
    argv += ["--steps", "3", "--batch-size", "8", "--eval-every", "3", "--no-progress", "--out", str(out)]
    return main([*argv, *more])


@pytest.fixture(scope="module")
def backtested(tiny_backbones, tmp_path_factory):
    """A panel run trained without baselines, backtested at 3 origins; (run, raw series, printed output)."""
    pytest.importorskip("statsforecast")
    folder = tmp_path_factory.mktemp("backtest")
    series = _panel(folder / "sales.csv")
    run = folder / "run"
    assert _train(tiny_backbones["gpt2"], folder / "sales.csv", run, "--no-baselines") == 0
    return run, series


@pytest.fixture(scope="module")
def record(backtested):
    run, _ = backtested
    assert main(["backtest", str(run), "--origins", "3", "--no-progress"]) == 0
    return json.loads((run / "backtest" / "backtest.json").read_text())


def _config(run, origin: int) -> dict:
    folder = run if origin == 1 else run / "backtest" / f"origin-{origin}"
    return json.loads((folder / "config.json").read_text())


def test_each_origin_scores_the_kth_block_from_the_end_of_the_raw_table(backtested, record):
    run, series = backtested
    for k in (1, 2, 3):
        config = _config(run, k)
        task = create_task(config["task"], **config["task_options"])
        end = -(k - 1) * HORIZON or None
        kept = [name for name, values in series.items() if len(values) - (k - 1) * HORIZON >= 2 * HORIZON + 1]
        assert task.collection.ids == kept
        for name, test, val in zip(kept, task.split_actuals("test"), task.split_actuals("val")):
            # the k-th block from the end, and the one before it validates (to the last bit but one: pandas'
            # CSV parser rounds some decimals otherwise than Python's float, by 1 ulp)
            np.testing.assert_allclose(test, series[name][-k * HORIZON : end], rtol=1e-15)
            np.testing.assert_allclose(val, series[name][-(k + 1) * HORIZON : -k * HORIZON], rtol=1e-15)
        result = record["results"][k - 1]
        assert result["origin"] == k and result["back"] == (k - 1) * HORIZON and result["series"] == len(kept)
    assert [r["skipped"] for r in record["results"]] == [0, 0, 1]  # d is too short at origin 3 alone
    # every origin trains the same model: the run's chosen look-back and patches, pinned
    pinned = {key: _config(run, 2)["task_options"][key] for key in ("lookback", "patch_size", "patch_stride")}
    assert pinned == {key: create_task(_config(run, 1)["task"], horizon=HORIZON).notes[key] for key in pinned}
    assert _config(run, 3)["seed"] == _config(run, 1)["seed"] and _config(run, 3)["steps"] == 3


def test_origin_1_is_the_run_s_own_test_and_the_mean_is_the_mean(backtested, record):
    run, _ = backtested
    summary = json.loads((run / "summary.json").read_text())
    first = record["results"][0]
    assert first["run"] == str(run) and first["back"] == 0
    for metric in ("smape", "mase", "owa"):
        assert first["fpt"][metric] == summary["test"]["test"][metric]
        for method in ("fpt", "Theta", "Naive"):
            values = [r["fpt" if method == "fpt" else "baselines"] for r in record["results"]]
            values = [v[metric] if method == "fpt" else v[method][metric] for v in values]
            assert record["mean"][method][metric] == pytest.approx(np.mean(values), rel=1e-12)
    for k in (2, 3):  # the others are runs of their own, each with its test scored at the end
        own = json.loads((run / "backtest" / f"origin-{k}" / "summary.json").read_text())
        assert record["results"][k - 1]["fpt"]["smape"] == own["test"]["test"]["smape"]
    rows = list(csv.DictReader((run / "backtest" / "backtest.csv").open()))
    assert len(rows) == 3 * (1 + len(first["baselines"])) + len(record["mean"])
    fpt_mean = next(r for r in rows if r["origin"] == "mean" and r["method"] == "fpt")
    assert float(fpt_mean["smape"]) == record["mean"]["fpt"]["smape"]


def test_the_baselines_are_scored_at_each_origin_on_its_own_block(backtested, record):
    run, series = backtested
    for result in record["results"]:  # origin 1 too, though the run skipped them
        assert {"Naive", "SeasonalNaive", "Naive2", "Theta", "AutoETS"} <= set(result["baselines"])
        back = result["back"]
        kept = [v[: len(v) - back] for v in series.values() if len(v) - back >= 2 * HORIZON + 1]
        # Naive forecasts the last value before the scored block: sMAPE by hand from the raw table
        by_hand = np.mean([smape(v[-HORIZON:], np.full(HORIZON, v[-HORIZON - 1])) for v in kept])
        assert result["baselines"]["Naive"]["smape"] == pytest.approx(by_hand, rel=1e-9)
    assert record["mean"]["Naive"]["smape"] != record["results"][0]["baselines"]["Naive"]["smape"]


def test_it_prints_each_origin_a_table_and_a_verdict_and_resumes_without_training_again(backtested, record, capsys):
    run, _ = backtested
    metrics = (run / "backtest" / "origin-2" / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert main(["backtest", str(run), "--origins", "3", "--no-progress"]) == 0  # every origin done: read back
    out = capsys.readouterr().out
    assert (run / "backtest" / "origin-2" / "metrics.jsonl").read_text() == metrics
    for k in (1, 2, 3):
        assert f"origin {k}/3 (" in out and f"origin {k}/3 done in " in out
    assert "mean sMAPE" in out and "\nfpt " in out and "\nTheta " in out
    assert ("beats fpt over 3 origins" in out) != ("fpt beats every baseline over 3 origins" in out)
    assert record["verdict"] in out
    # an origin stopped before its end (no summary.json yet) is resumed from its checkpoint, not trained anew
    (run / "backtest" / "origin-3" / "summary.json").unlink()
    assert main(["backtest", str(run), "--origins", "3", "--no-progress"]) == 0
    again = json.loads((run / "backtest" / "backtest.json").read_text())
    assert again["results"][2]["fpt"] == record["results"][2]["fpt"]
    assert (run / "backtest" / "origin-2" / "metrics.jsonl").read_text() == metrics
    # another step would need other origins than those trained: refused, naming the folder to delete
    assert main(["backtest", str(run), "--origins", "2", "--step", "2", "--no-progress"]) == 2
    assert "origin 1/2" not in capsys.readouterr().out  # before any origin starts
    assert main(["backtest", str(run), "--origins", "2", "--step", "2", "--no-progress"]) == 2
    message = one_line_error(capsys)
    assert "origin-2 was trained at cutoff 4, not 2" in message and "delete it" in message


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--origins", "0"], "--origins must be a whole number of at least 1, got 0"),
        (["--origins", "2", "--step", "0"], "--step must be a whole number of at least 1, got 0"),
        (["--origins", "12"], "at most 11 origins fit"),  # the longest, 52: (52 - 9) // 4 + 1
        (["--origins", "7", "--step", "8"], "at most 6 origins fit"),
    ],
)
def test_bad_origins_are_one_line(backtested, capsys, argv, expected):
    run, _ = backtested
    assert main(["backtest", str(run), *argv]) == 2
    assert expected in one_line_error(capsys)
    assert not (run / "backtest" / "origin-7").exists()


def test_a_run_of_no_collection_is_refused(finished_run, capsys):
    assert main(["backtest", str(finished_run), "--origins", "2"]) == 2
    assert "not a collection of series" in one_line_error(capsys)


def test_a_forecast_csv_run_is_refused_its_test_already_rolls_over_every_window(tiny_gpt2, tmp_path, capsys):
    hours = np.arange(300)
    dates = np.datetime64("2020-01-01T00:00") + hours * np.timedelta64(1, "h")
    values = 50 + np.cumsum(np.random.default_rng(0).normal(size=len(hours)))
    lines = ["date,load"] + [f"{str(d).replace('T', ' ')},{v!r}" for d, v in zip(dates, values.tolist())]
    (tmp_path / "load.csv").write_text("\n".join(lines) + "\n")
    argv = ["train", "--task", f"forecast:{tmp_path / 'load.csv'}", "--lookback", "24", "--horizon", "12"]
    argv += ["--patch-size", "8", "--patch-stride", "4", "--backbone", tiny_gpt2, "--steps", "1", "--batch-size", "4"]
    assert main([*argv, "--no-progress", "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    assert main(["backtest", str(tmp_path / "run"), "--origins", "2"]) == 2
    assert "already is a rolling-origin evaluation" in one_line_error(capsys)


def test_an_unfinished_run_is_refused(tiny_gpt2, tmp_path, capsys):
    _panel(tmp_path / "sales.csv")
    assert _train(tiny_gpt2, tmp_path / "sales.csv", tmp_path / "run") == 0
    (tmp_path / "run" / "summary.json").unlink()
    capsys.readouterr()
    assert main(["backtest", str(tmp_path / "run"), "--origins", "2"]) == 2
    assert "has not finished" in one_line_error(capsys)


def test_a_cutoff_that_leaves_no_series_long_enough_is_one_line(tmp_path):
    _panel(tmp_path / "sales.csv")
    raises_naming(
        lambda: create_task(f"panel:{tmp_path / 'sales.csv'}", horizon=HORIZON, cutoff=44),
        "--cutoff 44 leaves every series",
        "a cutoff of at most 43 fits",
    )


def test_a_run_trained_by_epochs_is_backtested_at_the_steps_it_ran(tiny_backbones, tmp_path):
    """Its config.json records the epochs asked beside the steps they came to; each origin trains those steps."""
    pytest.importorskip("statsforecast")
    _panel(tmp_path / "sales.csv")
    argv = ["train", "--task", f"panel:{tmp_path / 'sales.csv'}", "--horizon", str(HORIZON), "--epochs", "0.5"]
    argv += ["--backbone", tiny_backbones["gpt2"], "--batch-size", "8", "--no-progress", "--no-baselines"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 0
    ran = _config(tmp_path / "run", 1)
    assert ran["epochs"] == 0.5 and ran["steps"] >= 1
    assert main(["backtest", str(tmp_path / "run"), "--origins", "2", "--no-progress"]) == 0
    assert (_config(tmp_path / "run", 2)["steps"], _config(tmp_path / "run", 2)["epochs"]) == (ran["steps"], None)
