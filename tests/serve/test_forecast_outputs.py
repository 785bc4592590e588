"""A forecast run's results wherever a result is read: evaluate, predict (windows and a CSV series),
the hf export, reports, sweep rows and tables, Table 6-style convergence, learning curves,
trackers and attention maps; MSE and MAE, lower is better."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from helpers import one_line_error

from fpt.cli import main
from fpt.experiments.convergence import convergence
from fpt.experiments.tables import markdown_table, run_convergence, split_title, steps_table
from fpt.models.transformer import FrozenPretrainedTransformer
from fpt.training.evaluation import forecast_samples
from fpt.training.lifecycle import load_run, train
from fpt.training.run_dir import RunDir

SMALL = dict(lookback=48, horizon=24, patch_size=8, patch_stride=4)
FLAGS = [f"--{key.replace('_', '-')}={value}" for key, value in SMALL.items()]
COLUMNS = ("load", "temp")


def _series_csv(
    path,
    rows: int,
    step=np.timedelta64(1, "h"),
    start="2020-01-01T00:00",
    seed=0,
    date_text=lambda d: str(d).replace("T", " "),
) -> tuple[np.ndarray, np.ndarray]:
    """A random walk per column, far from 0 and 1 in scale, so that units matter; (dates, values)."""
    values = np.random.default_rng(seed).normal(size=(rows, len(COLUMNS))).cumsum(0) * [3.0, 0.5] + [200.0, -20.0]
    dates = np.datetime64(start, "s") + np.arange(rows) * step
    lines = ["date," + ",".join(COLUMNS)] + [
        f"{date_text(d)}," + ",".join(repr(float(v)) for v in row) for d, row in zip(dates, values)
    ]
    path.write_text("\n".join(lines) + "\n")
    return dates, values


@pytest.fixture(scope="module")
def forecast_run(tiny_backbones, tmp_path_factory):
    folder = tmp_path_factory.mktemp("forecast")
    _series_csv(folder / "series.csv", 400)
    run = folder / "run"
    assert (
        main(
            [
                "train",
                "--task",
                f"forecast:{folder / 'series.csv'}",
                *FLAGS,
                "--backbone",
                tiny_backbones["gpt2"],
                "--steps",
                "4",
                "--batch-size",
                "8",
                "--eval-every",
                "2",
                "--no-progress",
                "--no-baselines",  # statsforecast's: test_window_baselines; the intervals stay
                "--out",
                str(run),
            ]
        )
        == 0
    )
    return run


def _model_values(run, x: np.ndarray) -> np.ndarray:
    _, _, model, _ = load_run(run)
    model.eval()
    with torch.no_grad():
        return model(torch.from_numpy(x).float()).squeeze(-1).double().numpy()


def test_evaluate_reports_mse_and_mae_and_draws_no_confusion_matrix(forecast_run, capsys):
    assert main(["evaluate", str(forecast_run), "--splits", "all"]) == 0
    out = capsys.readouterr().out
    assert "val: MSE " in out and "test: MSE " in out and "MAE" in out and "accuracy" not in out
    assert not list(forecast_run.glob("confusion_*.png"))
    evaluation = RunDir(forecast_run).read_evaluation()  # a regression result passes the reader's checks
    test = evaluation["splits"]["test"]
    assert test["loss"] == test["mse"] and test["mae"] > 0 and "accuracy" not in test
    summary = RunDir(forecast_run).read_summary()
    assert test["mse"] == pytest.approx(summary["test"]["test"]["mse"])
    for split in ("val", "test"):  # a picture of sampled forecasts in place of the confusion matrix
        png = forecast_run / f"forecast_{split}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert evaluation["splits"][split]["forecast_png"] == str(png)


def test_the_drawn_forecasts_are_the_models_on_windows_spread_over_the_split(forecast_run):
    _, task, model, _ = load_run(forecast_run)
    data = task.eval_split_data("test")
    samples = forecast_samples(model, task, "test", channel=1, count=4)
    assert samples["starts"][0] == 0 and samples["starts"][-1] == data.windows - 1 and len(samples["starts"]) == 4
    x, y = data.examples(torch.tensor(samples["starts"]) * data.channels + 1)  # channel 1 of those windows
    assert torch.equal(samples["lookback"], x) and torch.equal(samples["truth"], y)
    np.testing.assert_allclose(
        samples["forecast"].numpy(), _model_values(forecast_run, x.numpy()), rtol=1e-5, atol=1e-5
    )


def test_predict_windows_from_an_npz_with_targets_reports_mse_and_mae(forecast_run, tmp_path, capsys):
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(5, 48)).cumsum(1), rng.normal(size=(5, 24))
    np.savez(tmp_path / "windows.npz", x=x, y=y)
    assert (
        main(["predict", str(forecast_run), "--input", str(tmp_path / "windows.npz"), "--out", str(tmp_path / "f.npy")])
        == 0
    )
    out = capsys.readouterr().out
    expected = _model_values(forecast_run, x)
    values = np.load(tmp_path / "f.npy")
    assert values.shape == (5, 24)
    np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(load_run(forecast_run).predict(x).numpy(), expected, rtol=1e-5, atol=1e-5)
    mse, mae = ((values - y) ** 2).mean(), np.abs(values - y).mean()
    assert f"5 forecasts of 24 steps: {tmp_path / 'f.npy'}" in out
    assert f"MSE {mse:.4f}, MAE {mae:.4f} on the targets in windows.npz" in out
    # the default output: a CSV of a row per window
    assert main(["predict", str(forecast_run), "--input", str(tmp_path / "windows.npz")]) == 0
    rows = list(csv.reader(open(forecast_run / "predictions-windows.npz.csv")))
    assert rows[0] == ["index"] + [f"t+{h}" for h in range(1, 25)] and len(rows) == 6
    np.testing.assert_allclose(np.array(rows[1:], dtype=float)[:, 1:], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "arrays, words",
    [
        (dict(x=np.zeros((3, 40))), ["(N, 48)", "--lookback"]),
        (dict(x=np.zeros((3, 48)), y=np.zeros((3, 12))), ["(N, 24)", "--horizon"]),
        (dict(x=np.full((3, 48), np.nan)), ["NaN"]),
        (dict(x=np.zeros((3, 48)), y=np.zeros((2, 24))), ["3 windows", "2 targets"]),
    ],
)
def test_windows_that_do_not_fit_the_run_are_one_line(forecast_run, tmp_path, capsys, arrays, words):
    np.savez(tmp_path / "bad.npz", **arrays)
    out = tmp_path / "f.csv"
    assert main(["predict", str(forecast_run), "--input", str(tmp_path / "bad.npz"), "--out", str(out)]) == 2
    message = one_line_error(capsys)
    assert all(word in message for word in words), message
    assert not out.exists()


def test_predict_continues_a_csv_series_in_its_units_and_its_step(forecast_run, tmp_path, capsys):
    # a daily series, two days a step, dates without times: the forecast follows all three
    dates, values = _series_csv(
        tmp_path / "recent.csv",
        60,
        step=np.timedelta64(2, "D"),
        start="2021-03-01",
        seed=9,
        date_text=lambda d: str(d)[:10],
    )
    assert (
        main(
            [
                "predict",
                str(forecast_run),
                "--input",
                str(tmp_path / "recent.csv"),
                "--out",
                str(tmp_path / "forecast.csv"),
            ]
        )
        == 0
    )
    assert "forecast of 24 steps (2021-06-29 to 2021-08-14) for load, temp" in capsys.readouterr().out
    with open(tmp_path / "forecast.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    bounds = [f"{c}-{side}-{level}" for level in (80, 95) for c in COLUMNS for side in ("lo", "hi")]
    assert rows[0] == ["date", *COLUMNS, *bounds] and len(rows) == 25  # the run's intervals after its forecast
    assert str(dates[-1])[:10] == "2021-06-27"  # 59 steps of 2 days after 2021-03-01
    expected_dates = [str(d)[:10] for d in dates[-1] + np.timedelta64(2, "D") * np.arange(1, 25)]
    assert [row[0] for row in rows[1:]] == expected_dates
    # by hand: each column's last 48 values scaled with the run's training scaler, through the
    # model, and back to the file's units
    notes = json.loads((forecast_run / "summary.json").read_text())["task_notes"]
    mean, std = np.array(notes["scaler_mean"]), np.array(notes["scaler_std"])
    scaled = _model_values(forecast_run, ((values[-48:] - mean) / std).T)  # (2, 24)
    by_hand = scaled.T * std + mean
    written = np.array([row[1:3] for row in rows[1:]], dtype=float)
    np.testing.assert_allclose(written, by_hand, rtol=1e-5, atol=1e-4)


def test_a_csv_with_the_runs_columns_in_another_order_is_read_by_name(forecast_run, tmp_path, capsys):
    # the same series twice, its columns in the run's order and swapped (an extra column, too):
    # each column's forecast must be the same, whatever its place in the file
    _series_csv(tmp_path / "ordered.csv", 60, seed=5)
    lines = (tmp_path / "ordered.csv").read_text().splitlines()
    swapped = []
    for line in lines:
        date, load, temp = line.split(",")
        swapped.append(",".join([date, "7" if date != "date" else "other", temp, load]))
    (tmp_path / "swapped.csv").write_text("\n".join(swapped) + "\n")
    forecasts = {}
    for name in ("ordered", "swapped"):
        out = tmp_path / f"{name}-forecast.csv"
        assert main(["predict", str(forecast_run), "--input", str(tmp_path / f"{name}.csv"), "--out", str(out)]) == 0
        with open(out, newline="") as handle:
            rows = list(csv.reader(handle))
        assert rows[0][:3] == ["date", *COLUMNS]  # labelled in the run's order
        forecasts[name] = np.array([row[1:] for row in rows[1:]], dtype=float)  # the intervals too
    np.testing.assert_array_equal(forecasts["swapped"], forecasts["ordered"])


def test_predict_never_writes_over_its_input_or_the_runs_data_and_asks_for_force_elsewhere(
    forecast_run, tmp_path, capsys
):
    _series_csv(tmp_path / "recent.csv", 60, seed=6)
    before = (tmp_path / "recent.csv").read_bytes()
    training = forecast_run.parent / "series.csv"
    training_bytes = training.read_bytes()
    for out, force in ((tmp_path / "recent.csv", []), (tmp_path / "recent.csv", ["--force"]), (training, ["--force"])):
        args = ["predict", str(forecast_run), "--input", str(tmp_path / "recent.csv"), "--out", str(out), *force]
        assert main(args) == 2
        message = one_line_error(capsys)
        assert "reads" in message and "another file" in message, message
    assert (tmp_path / "recent.csv").read_bytes() == before and training.read_bytes() == training_bytes
    # a file the user has: replaced only with --force
    mine = tmp_path / "mine.csv"
    mine.write_text("keep me\n")
    args = ["predict", str(forecast_run), "--input", str(tmp_path / "recent.csv"), "--out", str(mine)]
    assert main(args) == 2
    assert "--force" in one_line_error(capsys) and mine.read_text() == "keep me\n"
    assert main([*args, "--force"]) == 0
    assert mine.read_text().startswith("date,load,temp")
    # the default name in the run's folder is fpt's own: predicting twice replaces it
    default = ["predict", str(forecast_run), "--input", str(tmp_path / "recent.csv")]
    assert main(default) == 0 and main(default) == 0
    assert (forecast_run / "predictions-recent.csv.csv").is_file()


def test_an_hourly_csv_forecast_continues_its_hours(forecast_run, tmp_path):
    dates, _ = _series_csv(tmp_path / "recent.csv", 50, seed=4)
    assert (
        main(
            ["predict", str(forecast_run), "--input", str(tmp_path / "recent.csv"), "--out", str(tmp_path / "f.jsonl")]
        )
        == 0
    )
    records = [json.loads(line) for line in (tmp_path / "f.jsonl").read_text().splitlines()]
    assert [r["date"] for r in records[:2]] == ["2020-01-03 02:00:00", "2020-01-03 03:00:00"]  # 50 hours on
    bounds = {f"{c}-{side}-{level}" for level in (80, 95) for c in COLUMNS for side in ("lo", "hi")}
    assert len(records) == 24 and set(records[0]) == {"date", *COLUMNS, *bounds}


@pytest.mark.parametrize(
    "text, words",
    [
        ("date,load\n2020-01-01,1\n2020-01-02,2\n", ["no column 'temp'", "load, temp"]),
        (None, ["10 rows", "48", "--lookback"]),
    ],
)
def test_a_csv_that_does_not_fit_the_run_is_one_line(forecast_run, tmp_path, capsys, text, words):
    path = tmp_path / "recent.csv"
    if text is None:
        _series_csv(path, 10)
    else:
        path.write_text(text)
    out = tmp_path / "f.csv"
    assert main(["predict", str(forecast_run), "--input", str(path), "--out", str(out)]) == 2
    message = one_line_error(capsys)
    assert all(word in message for word in words), message
    assert not out.exists()


def test_an_hf_export_keeps_the_forecast_spec_and_predicts_as_the_run(forecast_run, tmp_path, capsys):
    export = tmp_path / "export"
    assert main(["export", str(forecast_run), "--format", "hf", "--out", str(export)]) == 0
    _, _, model, _ = load_run(forecast_run)
    rebuilt = FrozenPretrainedTransformer.from_pretrained(export)
    assert rebuilt.spec == model.spec
    assert (rebuilt.spec.target, rebuilt.spec.patch_stride, rebuilt.spec.window_norm) == ("values", 4, True)
    settings = json.loads((export / "config.json").read_text())["fpt"]
    final = RunDir(forecast_run).read_summary()["final"]
    assert settings["run"]["mse"] == final["mse"] and settings["run"]["mae"] == final["mae"]
    assert "accuracy" not in settings["run"]
    _series_csv(tmp_path / "recent.csv", 60, seed=2)
    for source, name in ((forecast_run, "run.csv"), (export, "export.csv")):
        assert (
            main(["predict", str(source), "--input", str(tmp_path / "recent.csv"), "--out", str(tmp_path / name)]) == 0
        )
    assert (tmp_path / "run.csv").read_text() == (tmp_path / "export.csv").read_text()


def test_a_forecast_runs_report_shows_mse_and_mae_on_its_splits(forecast_run, tmp_path):
    out = tmp_path / "report.html"
    assert main(["report", str(forecast_run), "--out", str(out)]) == 0
    page = out.read_text()
    summary = RunDir(forecast_run).read_summary()
    assert "<th>MSE</th><th>MAE</th>" in page
    assert f"{summary['test']['test']['mse']:.4f}" in page and f"{summary['final']['mse']:.4f}" in page
    assert "MSE during training" in page and "accuracy" not in page.split('id="results"')[1].split("</table>")[0]


def test_attention_maps_a_forecast_run(forecast_run):
    assert main(["attention", str(forecast_run), "--out", str(forecast_run / "attention_layer0.png")]) == 0
    assert (forecast_run / "attention_layer0.png").stat().st_size > 0


def test_learning_curves_of_a_forecast_plot_mse(forecast_run, tmp_path, monkeypatch):
    from fpt.experiments import plots

    labels = []
    real_save = plots._save
    monkeypatch.setattr(
        plots, "_save", lambda fig, path: (labels.append(fig.axes[0].get_ylabel()), real_save(fig, path))[1]
    )
    row = {"task": "forecast", "status": "done", "run_dir": str(forecast_run), "variant": "fpt"}
    assert plots.learning_curves([row], tmp_path / "curve.png") is not None
    assert labels == ["val MSE, during training"]


def _forecast_row(label: str, mse: float, mae: float, seed: int = 0) -> dict:
    return {
        "task": "forecast:series.csv",
        "row": label,
        "seed": seed,
        "status": "done",
        "split": "test",
        "mse": mse,
        "mae": mae,
        "mse:test": mse,
        "mae:test": mae,
        "eval_split": "val",
    }


def test_a_table_of_forecasts_shows_mse_and_mae_the_lowest_in_bold():
    rows = [
        _forecast_row("fpt", 0.40, 0.42),
        _forecast_row("fpt", 0.44, 0.44, seed=1),
        _forecast_row("linear", 0.45, 0.46),
        _forecast_row("naive", 0.70, 0.55),
    ]
    title = split_title(rows)
    assert title == "test MSE / MAE (lower is better)"
    table = markdown_table(rows, title, None, "row")
    assert "| fpt | **0.420 ± 0.028 / 0.430** (n=2) |" in table
    assert "| linear | 0.450 / 0.460 (n=1) |" in table and "| naive | 0.700 / 0.550 (n=1) |" in table
    # beside a classification task, each column keeps its own metric
    mixed = rows + [
        {
            "task": "bit-xor",
            "row": "fpt",
            "seed": 0,
            "status": "done",
            "split": "heldout",
            "accuracy": 0.75,
            "accuracy:heldout": 0.75,
            "mse": "",
            "mse:test": "",
        }
    ]
    assert "MSE / MAE for a forecast" in split_title(mixed)
    assert "75.0 (n=1)" in markdown_table(mixed, "t", None, "row")


def test_convergence_on_mse_is_lower_is_better_with_a_relative_tolerance():
    falling = [1.0, 0.8, 0.6, 0.5, 0.45, 0.42, 0.41, 0.405, 0.404, 0.404, 0.404, 0.404, 0.404, 0.404, 0.404, 0.404]
    history = [(10 * (i + 1), mse) for i, mse in enumerate(falling)]
    found = convergence(history, metric="mse")
    # means of three: 0.4117 (from step 60), 0.4063 (from 70), 0.4043 (80), 0.404 (90 on); the first
    # within 1% of the lowest (0.404 + 0.00404) is the one from step 70
    assert found.converged and found.metric == "mse" and found.score == pytest.approx(0.404)
    assert found.step == 70
    still = [(10 * (i + 1), 1.0 - 0.05 * i) for i in range(16)]
    assert convergence(still, metric="mse").why_not == "still improving at the end"
    # read as accuracy (higher is better), the same falling curve would have "converged" at its worst
    assert convergence(history).step == 10


def test_table6_of_forecast_runs_reads_their_mse(tmp_path):
    falling = [1.0, 0.8, 0.6, 0.5, 0.45, 0.42, 0.41, 0.405, 0.404, 0.404, 0.404, 0.404, 0.404, 0.404, 0.404, 0.404]
    rows = []
    for variant in ("fpt", "random"):
        run = tmp_path / variant
        run.mkdir()
        (run / "config.json").write_text("{}")
        shift = 0 if variant == "fpt" else 2  # random gets there 20 steps later
        curve = falling[:1] * shift + falling[: len(falling) - shift]
        (run / "metrics.jsonl").write_text(
            "".join(
                json.dumps({"step": 10 * (i + 1), "split": "val", "loss": m, "mse": m, "mae": m, "examples": 100})
                + "\n"
                for i, m in enumerate(curve)
            )
        )
        rows.append({**_forecast_row(variant, 0.4, 0.4), "variant": variant, "run_dir": str(run)})
    assert run_convergence(tmp_path / "fpt").score == pytest.approx(0.404)
    table = steps_table(rows, "steps")
    assert "MSE, lower is better" in table and "MSE during training, on the val split" in table
    assert (
        "| fpt | 70 (1/1 converged, to MSE 0.404)" in table and "| random | 90 (1/1 converged, to MSE 0.404)" in table
    )
    assert "| speedup random/fpt | 1.3x |" in table


def test_a_tracker_logs_a_forecasts_mse_and_mae(tiny_gpt2, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from fpt.tracking import build_tracker
    from fpt.training.config import TrainConfig

    _series_csv(tmp_path / "series.csv", 400)
    config = TrainConfig(
        task=f"forecast:{tmp_path / 'series.csv'}",
        task_options=SMALL,
        backbone=tiny_gpt2,
        steps=4,
        batch_size=8,
        eval_every=2,
        baselines=False,
    )
    _, run_dir = train(config, out=tmp_path / "run", progress=False, tracker=build_tracker("tensorboard"))
    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    records = RunDir(run_dir).read_metrics()
    for key in ("mse", "mae"):
        logged = [(e.step, e.value) for e in events.Scalars(key)]
        assert logged == [(r["step"], pytest.approx(r[key], rel=1e-6)) for r in records]
    assert "accuracy" not in events.Tags()["scalars"]


@pytest.mark.slow
def test_a_sweep_of_forecasts_has_mse_and_mae_rows_and_a_report(tiny_gpt2, tmp_path):
    _series_csv(tmp_path / "series.csv", 400)
    spec = tmp_path / "spec.yaml"
    options = "".join(f"  {key}: {value}\n" for key, value in SMALL.items())
    spec.write_text(
        f"name: fc\ngrid:\n  task: ['forecast:{tmp_path / 'series.csv'}']\n  lr: [0.001, 0.01]\n"
        f"options:\n  steps: 2\n  eval_every: 1\n  batch_size: 8\n  backbone: {tiny_gpt2}\n{options}"
    )
    sweep = tmp_path / "sweep"
    assert main(["sweep", str(spec), "--out", str(sweep), "--no-progress"]) == 0
    with open(sweep / "results.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {"mse", "mae", "mse:test", "mae:test", "eval_mse", "eval_mae"} <= set(rows[0]) and "accuracy" not in rows[0]
    for row in rows:
        summary = RunDir(row["run_dir"]).read_summary()
        assert float(row["mse:test"]) == pytest.approx(summary["test"]["test"]["mse"]) and row["split"] == "test"
    lowest = min(rows, key=lambda r: float(r["mse"]))
    text = (sweep / "results.md").read_text()
    assert "test MSE / MAE (lower is better)" in text
    assert f"| {lowest['row']} | **{float(lowest['mse']):.3f}" in text
    assert main(["report", str(sweep)]) == 0
    assert "MSE" in (sweep / "report.html").read_text()
