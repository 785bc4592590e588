"""Forecasting: the field's splits and scaling, windows, every test window scored, the model's
patching and per-window normalisation, regression training and its resume, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import ETT_COLUMNS, one_line_error, write_ett_csv

from fpt.cli import main
from fpt.core.errors import FptError
from fpt.models.ends import WindowScale, patches
from fpt.tasks import create_task
from fpt.tasks.base import series_tokens
from fpt.tasks.forecasting import ETT_HOURS
from fpt.training.build import build
from fpt.training.config import TrainConfig
from fpt.training.evaluation import evaluate
from fpt.training.lifecycle import resume, train

ETT_ROWS = sum(ETT_HOURS.values()) + 100  # 20 months and a few days the protocol leaves unused
SMALL = dict(lookback=48, horizon=24, patch_size=8, patch_stride=4)


@pytest.fixture(scope="module")
def ett_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ett")
    dates, values = write_ett_csv(folder / "ETTh1.csv", hours=ETT_ROWS, seed=3)
    return folder, dates, values


def _csv(path, rows: int, columns=("a", "b"), seed=0) -> np.ndarray:
    values = np.random.default_rng(seed).normal(size=(rows, len(columns))).cumsum(0)
    dates = np.datetime64("2020-01-01T00:00") + np.arange(rows) * np.timedelta64(1, "h")
    lines = [",".join(["date", *columns])] + [
        ",".join([str(d), *map(repr, row.tolist())]) for d, row in zip(dates, values)
    ]
    path.write_text("\n".join(lines) + "\n")
    return values


def test_ett_splits_by_months_with_the_lookback_reaching_back(ett_dir):
    folder, dates, values = ett_dir
    task = create_task("ett:ETTh1", data_dir=str(folder), **SMALL)
    lookback, horizon = SMALL["lookback"], SMALL["horizon"]
    train_end, val_end = ETT_HOURS["train"], ETT_HOURS["train"] + ETT_HOURS["val"]
    assert task.notes["windows"] == {
        "train": train_end - lookback - horizon + 1,
        "val": ETT_HOURS["val"] - horizon + 1,
        "test": ETT_HOURS["test"] - horizon + 1,
    }
    assert task.notes["first_target_date"]["val"] == str(dates[train_end])
    assert task.notes["first_target_date"]["test"] == str(dates[val_end])
    # the scaler saw the training months only
    mean, std = values[:train_end].mean(0), values[:train_end].std(0)
    np.testing.assert_allclose(task.notes["scaler_mean"], mean)
    # example i: channel i % 7 of the window starting at i // 7; the first test window's look-back
    # is the last hours of validation, its target the first test hours
    batch = task.make_batch(task.evals["test"], torch.tensor([0, 7 * 5 + 3]), None)
    scaled = (values - mean) / std
    first = val_end - lookback
    np.testing.assert_allclose(batch.x[0].numpy(), scaled[first:val_end, 0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batch.y[0].numpy(), scaled[val_end : val_end + horizon, 0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batch.x[1].numpy(), scaled[first + 5 : val_end + 5, 3], rtol=1e-5, atol=1e-5)
    assert task.spec.regression and task.spec.num_outputs == horizon and task.spec.window_norm
    assert task.spec.seq_len == series_tokens(lookback, 8, 4) == 12


def test_a_csv_of_ones_own_splits_70_10_20_in_time_order(tmp_path):
    _csv(tmp_path / "mine.csv", 1000)
    task = create_task(f"forecast:{tmp_path / 'mine.csv'}", **SMALL)
    assert task.notes["split_rows"] == {"train": [0, 700], "val": [652, 800], "test": [752, 1000]}
    assert task.notes["channels"] == 2 and task.eval_split == "val" and task.test_splits == ("test",)
    assert len(task.evals["test"]) == 2 * (200 - 24 + 1)
    picked = create_task(f"forecast:{tmp_path / 'mine.csv'}", columns="b", **SMALL)
    assert picked.notes["columns"] == ["b"]


def test_a_csv_without_a_look_back_gets_one_its_rows_afford_and_says_so(tmp_path):
    _csv(tmp_path / "long.csv", 2000)  # 1,400 training rows: One Fits All's 336 fits
    task = create_task(f"forecast:{tmp_path / 'long.csv'}", horizon=24)
    assert (task.notes["lookback"], task.notes["patch_size"], task.notes["patch_stride"]) == (336, 16, 8)
    assert "chosen_from_data" not in task.notes
    _csv(tmp_path / "monthly.csv", 144)  # 12 years of months: 100 training rows
    task = create_task(f"forecast:{tmp_path / 'monthly.csv'}", horizon=12)
    assert task.notes["lookback"] == 36 and task.notes["chosen_from_data"].startswith("look-back 36 (3 x the horizon")
    with pytest.raises(FptError, match="a look-back of at most 88 fits this horizon"):
        create_task(f"forecast:{tmp_path / 'monthly.csv'}", horizon=12, lookback=96)


def test_every_test_window_is_scored_whatever_the_batch(tmp_path, tiny_gpt2):
    _csv(tmp_path / "mine.csv", 400)
    config = TrainConfig(task=f"forecast:{tmp_path / 'mine.csv'}", task_options=SMALL, backbone=tiny_gpt2)
    task, model = build(config)
    whole = len(task.evals["test"])
    for batch_size in (7, 64, whole + 5):
        result = evaluate(model, task, batch_size, split="test")
        assert result["examples"] == whole and set(result) >= {"mse", "mae", "loss"}
    assert evaluate(model, task, 7, split="test")["mse"] == pytest.approx(
        evaluate(model, task, 64, split="test")["mse"]
    )


def test_an_eval_subset_of_a_forecast_spans_the_split_window_by_window(ett_dir, tiny_gpt2):
    folder, _, _ = ett_dir
    config = TrainConfig(task="ett:ETTh1", task_options={"data_dir": str(folder), **SMALL}, backbone=tiny_gpt2)
    task, model = build(config)
    data = task.evals["val"]  # 2,857 windows x 7 channels
    index, name = task.subset_index("val", 700)  # 100 windows at most: every 29th
    assert name == "[::29 windows]" and len(index) == 7 * len(range(0, data.windows, 29)) <= 700
    assert index[:8].tolist() == [0, 1, 2, 3, 4, 5, 6, 29 * 7]  # each chosen window with all its channels
    assert index[-7:].tolist() == [(data.windows - 1) // 29 * 29 * 7 + c for c in range(7)]  # reaching the end
    result = evaluate(model, task, 64, split="val", limit=700)
    x, y = data.examples(index)
    with torch.no_grad():
        model.eval()
        mse = (model(x).reshape(y.shape) - y).double().square().mean().item()
    assert result["split"] == "val[::29 windows]" and result["examples"] == len(index)
    assert result["mse"] == pytest.approx(mse, rel=1e-5)
    assert task.subset_index("val", len(data)) is None  # the whole split fits: scored whole, named "val"
    assert evaluate(model, task, 256, split="val", limit=len(data))["split"] == "val"


def test_patches_cover_the_window_and_its_padded_end():
    x = torch.arange(20.0).reshape(1, 20)
    cut = patches(x, 8, 4)
    assert cut.shape == (1, series_tokens(20, 8, 4), 8) == (1, 5, 8)
    assert cut[0, 0].tolist() == list(range(8)) and cut[0, -1].tolist() == [16, 17, 18, 19, 19, 19, 19, 19]


def test_window_norm_makes_forecasts_follow_the_windows_level_and_scale(tmp_path, tiny_gpt2):
    _csv(tmp_path / "mine.csv", 400)
    config = TrainConfig(task=f"forecast:{tmp_path / 'mine.csv'}", task_options=SMALL, backbone=tiny_gpt2)
    task, model = build(config)
    model.eval()
    x = task.make_batch(task.evals["val"], torch.arange(4), None).x
    with torch.no_grad():
        base, moved = model(x), model(x * 3.0 + 10.0)
    torch.testing.assert_close(moved, base * 3.0 + 10.0, rtol=1e-4, atol=1e-3)
    scale = WindowScale(x)
    torch.testing.assert_close(scale.normalize(x).mean(1), torch.zeros(4), atol=1e-5, rtol=0)


def test_a_forecast_trains_scores_test_once_and_resumes_exactly(tmp_path, tiny_gpt2):
    _csv(tmp_path / "mine.csv", 400)
    config = dict(
        task=f"forecast:{tmp_path / 'mine.csv'}",
        task_options=SMALL,
        backbone=tiny_gpt2,
        steps=10,
        batch_size=8,
        eval_every=5,
        seed=2,
        baselines=False,  # statsforecast's, tested in test_window_baselines: 4-6 s a run here
    )
    straight, _ = train(TrainConfig(**config), out=tmp_path / "straight", progress=False)
    assert straight["final"]["split"] == "val" and set(straight["test"]) == {"test"}
    assert straight["test"]["test"]["mse"] > 0 and straight["test"]["test"]["mae"] > 0
    saved = json.loads((tmp_path / "straight" / "config.json").read_text())
    assert saved["pooling"] == "flatten"  # the task's default head, recorded as it ran

    def crash(step, loss):
        if step == 7:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(TrainConfig(**config), out=tmp_path / "killed", progress=False, on_step=crash)
    resumed, _ = resume(tmp_path / "killed", progress=False)
    assert resumed["final"] == straight["final"] and resumed["test"] == straight["test"]


def test_target_mse_stops_a_run(tmp_path, tiny_gpt2):
    _csv(tmp_path / "mine.csv", 400)
    summary, _ = train(
        TrainConfig(
            task=f"forecast:{tmp_path / 'mine.csv'}",
            task_options=SMALL,
            backbone=tiny_gpt2,
            steps=20,
            batch_size=8,
            eval_every=5,
            target_mse=1e6,
            baselines=False,
        ),
        out=tmp_path / "run",
        progress=False,
    )
    assert summary["status"] == "target_reached" and summary["step"] == 5


@pytest.mark.parametrize(
    "make, options, names",
    [
        (lambda p: p.write_text("when,a\nx,1\ny,2\n"), {}, ["--date-column"]),
        (lambda p: p.write_text("date,a\n2020-01-01,1\n2020-01-02,high\n"), {}, ["a", "high"]),
        (lambda p: p.write_text("date,a\n2020-01-01,1\n2020-01-02,\n2020-01-03,3\n"), {}, ["gap"]),
        (lambda p: _csv(p, 60), {}, ["--lookback", "--horizon"]),
        (lambda p: _csv(p, 400), {"horizon": 0}, ["--horizon"]),
        (lambda p: _csv(p, 400), {"patch_size": 64}, ["--patch-size", "--lookback"]),
        (lambda p: _csv(p, 400), {"patch_stride": 20}, ["--patch-stride 20", "steps 9 to 20", "never be read"]),
    ],
)
def test_bad_series_are_one_line_and_write_nothing(tmp_path, capsys, tiny_gpt2, make, options, names):
    path = tmp_path / "bad.csv"
    make(path)
    flags = [f"--{key.replace('_', '-')}={value}" for key, value in {**SMALL, **options}.items()]
    out = tmp_path / "run"
    assert (
        main(
            ["train", "--task", f"forecast:{path}", *flags, "--backbone", tiny_gpt2, "--out", str(out), "--no-progress"]
        )
        == 2
    )
    message = one_line_error(capsys)
    assert all(name in message for name in names), message
    assert not out.exists()


def test_ett_without_its_file_names_the_fetch(tmp_path):
    with pytest.raises(FptError, match="fpt data get ett"):
        create_task("ett:ETTh1", data_dir=str(tmp_path))
    with pytest.raises(FptError, match="ETTh1 or ETTh2"):
        create_task("ett:ETTm1", data_dir=str(tmp_path))


def test_none_leaves_a_window_option_to_the_task_and_is_refused_where_no_rule_chooses_it(tmp_path, ett_dir):
    # a config's null: a CSV's look-back and patches are chosen from its rows ...
    _csv(tmp_path / "mine.csv", 400)
    none = dict(lookback=None, patch_size=None, patch_stride=None)
    assert create_task(f"forecast:{tmp_path / 'mine.csv'}", horizon=24, **none).notes["lookback"] == 120
    # ... but nothing chooses a horizon, or ETT's windows: the words of a 0, not a traceback
    for task, options, key in [
        (f"forecast:{tmp_path / 'mine.csv'}", {"horizon": None}, "--horizon"),
        ("ett:ETTh1", {**SMALL, "horizon": None}, "--horizon"),
        ("ett:ETTh1", {**SMALL, "patch_stride": None}, "--patch-stride"),
    ]:
        where = {} if task.startswith("forecast") else {"data_dir": str(ett_dir[0])}
        with pytest.raises(FptError, match=f"^{key} must be a whole number of at least 1, got None$"):
            create_task(task, **where, **options)


def test_ett_columns_are_the_channels(ett_dir):
    task = create_task("ett:ETTh1", data_dir=str(ett_dir[0]), **SMALL)
    assert task.notes["columns"] == list(ETT_COLUMNS) and task.evals["val"].channels == 7


def test_a_run_refuses_its_csv_once_the_file_has_changed(tmp_path, tiny_gpt2, capsys):
    path = tmp_path / "mine.csv"
    _csv(path, 400)
    out = tmp_path / "run"
    flags = [f"--{key.replace('_', '-')}={value}" for key, value in SMALL.items()]
    assert (
        main(
            [
                "train",
                "--task",
                f"forecast:{path}",
                *flags,
                "--backbone",
                tiny_gpt2,
                "--steps",
                "2",
                "--eval-every",
                "1",
                "--batch-size",
                "4",
                "--out",
                str(out),
                "--no-progress",
                "--no-baselines",
            ]
        )
        == 0
    )
    assert len(json.loads((out / "config.json").read_text())["task_options"]["sha256"]) == 64
    capsys.readouterr()
    _csv(path, 500)  # grown: its 70% boundary would move, former test rows would train
    assert main(["evaluate", str(out)]) == 2
    assert "changed since this run was trained" in one_line_error(capsys)


@pytest.mark.parametrize("task, flag", [("forecast", "--target-accuracy=0.9"), ("bit-xor", "--target-mse=0.5")])
def test_a_target_of_the_other_kind_is_refused(tmp_path, tiny_gpt2, capsys, task, flag):
    _csv(tmp_path / "mine.csv", 400)
    name = f"forecast:{tmp_path / 'mine.csv'}" if task == "forecast" else task
    flags = [f"--{key.replace('_', '-')}={value}" for key, value in SMALL.items()] if task == "forecast" else []
    assert (
        main(
            [
                "train",
                "--task",
                name,
                *flags,
                flag,
                "--backbone",
                tiny_gpt2,
                "--out",
                str(tmp_path / "run"),
                "--no-progress",
            ]
        )
        == 2
    )
    assert "--target-" in one_line_error(capsys) and not (tmp_path / "run").exists()
