"""The forecasting baselines: DLinear (`--model linear`) trained by fpt's loop, and the last-value
forecast (NaiveForecast) scored by fpt.evaluate without training."""

import json

import numpy as np
import pytest
import torch
from helpers import one_line_error, raises_naming, write_ett_csv

from fpt.cli import main
from fpt.models.baselines import build_baseline
from fpt.models.baselines.forecast import DLinear, NaiveForecast, moving_average
from fpt.tasks import create_task
from fpt.training.build import build
from fpt.training.checkpoint import load_checkpoint
from fpt.training.config import TrainConfig
from fpt.training.evaluation import evaluate
from fpt.training.lifecycle import resume, train
from fpt.training.run_dir import RunDir

WINDOW = dict(lookback=32, horizon=8, patch_size=8, patch_stride=4)


def write_sine_csv(path, rows: int = 400, seed: int = 0):
    """Hourly rows of three noisy sine channels (periods 24, 12, 48 hours): a series a linear
    model on the look-back learns to forecast."""
    rng = np.random.default_rng(seed)
    t = np.arange(rows)
    values = np.stack(
        [
            np.sin(2 * np.pi * t / period) * scale + rng.normal(0, 0.1, rows)
            for period, scale in ((24, 2.0), (12, 1.0), (48, 3.0))
        ],
        axis=1,
    )
    dates = np.datetime64("2020-01-01T00:00:00") + t * np.timedelta64(1, "h")
    lines = ["date,a,b,c"] + [
        ",".join([str(d).replace("T", " "), *map(repr, row.tolist())]) for d, row in zip(dates, values)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def linear_config(csv, **overrides):
    base = dict(
        task="forecast:" + str(csv),
        task_options=dict(WINDOW),
        model="linear",
        steps=30,
        batch_size=16,
        eval_every=10,
        lr=5e-3,
        seed=1,
        baselines=False,  # statsforecast's, tested in test_window_baselines: 4-6 s a run here
    )
    return TrainConfig(**{**base, **overrides})


def test_dlinear_maps_windows_to_a_horizon_of_values():
    model = DLinear(lookback=32, horizon=8)
    assert model(torch.randn(5, 32)).shape == (5, 8, 1)
    assert sum(p.numel() for p in model.parameters()) == 2 * (32 * 8 + 8)  # trend and seasonal layers


def test_moving_average_pads_with_the_edge_values():
    x = torch.tensor([[1.0, 2.0, 4.0, 8.0, 16.0]])
    # kernel 3: one copy of the first value before, one of the last after: [1, 1, 2, 4, 8, 16, 16]
    expected = torch.tensor([[(1 + 1 + 2) / 3, (1 + 2 + 4) / 3, (2 + 4 + 8) / 3, (4 + 8 + 16) / 3, (8 + 16 + 16) / 3]])
    assert torch.allclose(moving_average(x, 3), expected)
    # DLinear's kernel 25 on a 5-step window: 12 copies each side, so step 0 averages 12 + 1 + ... firsts
    padded = [1.0] * 12 + x[0].tolist() + [16.0] * 12
    expected25 = torch.tensor([[sum(padded[i : i + 25]) / 25 for i in range(5)]])
    assert torch.allclose(moving_average(x), expected25)
    with pytest.raises(ValueError):
        DLinear(32, 8, kernel=24)


def test_dlinear_sums_a_linear_map_of_the_trend_and_one_of_the_rest():
    model = DLinear(lookback=32, horizon=8, kernel=5)
    x = torch.randn(3, 32)
    trend = moving_average(x, 5)
    expected = model.trend(trend) + model.seasonal(x - trend)
    assert torch.allclose(model(x).squeeze(-1), expected)


def test_fpt_train_model_linear_learns_and_scores_the_test_split_at_the_end(tmp_path):
    csv = write_sine_csv(tmp_path / "sine.csv")
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                f"forecast:{csv}",
                "--lookback",
                "32",
                "--horizon",
                "8",
                "--patch-size",
                "8",
                "--patch-stride",
                "4",
                "--model",
                "linear",
                "--steps",
                "30",
                "--eval-every",
                "10",
                "--batch-size",
                "16",
                "--lr",
                "5e-3",
                "--no-progress",
                "--no-baselines",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [10, 20, 30] and all(m["split"] == "val" for m in metrics)
    assert metrics[-1]["mse"] < metrics[0]["mse"] and metrics[-1]["train_loss"] < metrics[0]["train_loss"]
    test = summary["test"]["test"]
    # 20% of 400 rows = 80 test rows: 80 - 8 + 1 windows (the look-back reaches into validation) x 3 channels
    assert test["examples"] == (80 - 8 + 1) * 3 and {"mse", "mae"} <= set(test)
    assert summary["trained_params"] == 2 * (32 * 8 + 8)


def test_a_resumed_linear_run_equals_an_uninterrupted_one(tmp_path):
    csv = write_sine_csv(tmp_path / "sine.csv")
    uninterrupted, _ = train(linear_config(csv), out=tmp_path / "straight", progress=False)

    def crash(step, loss):
        if step == 17:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(linear_config(csv), out=tmp_path / "killed", progress=False, on_step=crash)
    assert load_checkpoint(tmp_path / "killed" / RunDir.CHECKPOINT).step == 10
    resumed, _ = resume(tmp_path / "killed", progress=False)
    assert resumed["resumed_from_step"] == 10
    a = load_checkpoint(tmp_path / "straight" / RunDir.CHECKPOINT)
    b = load_checkpoint(tmp_path / "killed" / RunDir.CHECKPOINT)
    for name in a.params:
        assert torch.equal(a.params[name], b.params[name]), name
    assert resumed["final"] == uninterrupted["final"] and resumed["test"] == uninterrupted["test"]


def test_the_naive_forecast_is_exact_on_a_series_constant_in_each_window(tmp_path):
    # each channel holds one value throughout (scaled to 0: a constant column scales by 1), so every
    # window's look-back and horizon are the same value
    rows = 400
    t = np.arange(rows)
    values = np.stack([np.full(rows, 3.0), np.full(rows, -1.5)], axis=1)
    dates = np.datetime64("2020-01-01T00:00:00") + t * np.timedelta64(1, "h")
    csv = tmp_path / "flat.csv"
    csv.write_text(
        "date,a,b\n" + "".join(f"{str(d).replace('T', ' ')},{a!r},{b!r}\n" for d, (a, b) in zip(dates, values.tolist()))
    )
    task = create_task("forecast:" + str(csv), **WINDOW)
    for split in ("val", "test"):
        result = evaluate(NaiveForecast(8), task, split=split)
        assert result["mse"] == 0.0 and result["mae"] == 0.0 and result["examples"] == len(task.evals[split])


def test_the_naive_forecast_repeats_the_last_value_of_each_window(tmp_path):
    task = create_task("forecast:" + str(write_sine_csv(tmp_path / "sine.csv")), **WINDOW)
    split = task.evals["test"]
    x, y = split.examples(torch.arange(len(split)))
    result = evaluate(NaiveForecast(8), task, split="test")
    errors = x[:, -1:].double() - y.double()
    assert result["examples"] == len(split)
    assert result["mse"] == pytest.approx(errors.square().mean().item(), rel=1e-9)
    assert result["mae"] == pytest.approx(errors.abs().mean().item(), rel=1e-9)


def test_linear_is_refused_on_a_classification_task():
    raises_naming(
        lambda: build(TrainConfig(task="bit-xor", task_options={"n_bits": 4}, model="linear")),
        "--model linear",
        "bit-xor",
    )


@pytest.mark.parametrize("model", ["lstm", "lstm*-frozen", "cnn"])
def test_classification_baselines_are_refused_on_a_forecast(tmp_path, model):
    task = create_task("forecast:" + str(write_sine_csv(tmp_path / "sine.csv")), **WINDOW)
    raises_naming(lambda: build_baseline(model, task), f"--model {model}", "--model linear")


def test_the_cli_refuses_lstm_on_ett_in_one_line(tmp_path, capsys):
    write_ett_csv(tmp_path / "ETTh1.csv", hours=20 * 30 * 24, seed=0)
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "ett:ETTh1",
                "--data-dir",
                str(tmp_path),
                "--model",
                "lstm",
                "--steps",
                "2",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 2
    )
    assert "--model linear" in one_line_error(capsys) and not out.exists()
