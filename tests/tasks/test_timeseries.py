"""The ucr task on .ts files written here in the real format, plus sktime's bundled GunPoint."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
import torch
from helpers import raises_naming, write_ts

import fpt.data.ts as ts
from fpt.tasks import create_task
from fpt.training.build import build
from fpt.training.config import TrainConfig
from fpt.training.evaluation import evaluate, predict

# Every .ts file is read by sktime's loader: without sktime only the error saying so is testable.
needs_sktime = pytest.mark.skipif(
    importlib.util.find_spec("sktime") is None, reason="the ucr task reads .ts files with sktime (pip install sktime)"
)


def znorm(values) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    return (v - v.mean()) / v.std()


UNIVARIATE_TRAIN = [
    ([[1, 2, 3, 4, 5, 6]], "10"),
    ([[6, 5, 4, 3, 2, 1]], "9"),
    ([[0, 0, 1, 1, 0, 0]], "2"),
    ([[3, 1, 3, 1, 3, 1]], "10"),
]
UNIVARIATE_TEST = [([[2, 4, 6, 8, 10, 12]], "9"), ([[5, 5, 5, 5, 5, 5]], "2"), ([[1, 0, 1, 0, 1, 0]], "10")]


@pytest.fixture
def univariate(tmp_path):
    write_ts(tmp_path / "Tiny" / "Tiny_TRAIN.ts", UNIVARIATE_TRAIN)
    write_ts(tmp_path / "Tiny" / "Tiny_TEST.ts", UNIVARIATE_TEST)
    return tmp_path


@needs_sktime
def test_univariate_tokens_labels_and_znorm(univariate):
    task = create_task("ucr", dataset="Tiny", data_dir=str(univariate), patch_size=2)
    assert task.spec.seq_len == 3 and task.spec.input_dim == 2 and task.spec.num_classes == 3
    assert task.notes["classes"] == ["2", "9", "10"]  # numeric order, not "10" < "2"
    assert task.eval_split == "test" and task.eval_splits == ("test",)
    assert task.notes["series_length"] == 6 and task.notes["channels"] == 1 and task.notes["tokens"] == 3
    assert task.train.lengths is None  # equal lengths: no mask

    batch = next(task.eval_batches(8))  # the official TEST split, in file order
    assert batch.x.shape == (3, 3, 2) and batch.mask is None
    assert batch.y[:, 0].tolist() == [1, 0, 2]
    expected = znorm([2, 4, 6, 8, 10, 12]).reshape(3, 2)  # token t = steps 2t, 2t+1
    assert torch.allclose(batch.x[0], torch.from_numpy(expected).float(), atol=1e-6)
    assert torch.equal(batch.x[1], torch.zeros(3, 2))  # a constant series becomes 0, not NaN

    labels = sorted(task.train.y.tolist())
    assert labels == [0, 1, 2, 2]
    raw = create_task("ucr", dataset="Tiny", data_dir=str(univariate / "Tiny"), patch_size=2, znorm=False)
    assert torch.equal(next(raw.eval_batches(8)).x[0].flatten(), torch.tensor([2.0, 4, 6, 8, 10, 12]))


@needs_sktime
def test_patch_that_does_not_divide_pads_the_last_token(univariate):
    task = create_task("ucr", dataset="Tiny", data_dir=str(univariate), patch_size=4)
    x = next(task.eval_batches(8)).x
    assert x.shape == (3, 2, 4)
    assert torch.equal(x[:, 1, 2:], torch.zeros(3, 2))  # steps 6 and 7 do not exist


@needs_sktime
def test_multivariate_unequal_lengths_are_masked_and_missing_values_zeroed(tmp_path):
    train = [
        ([[1, 2, 3, 4, 5], [5, 4, 3, 2, 1]], "walk"),
        ([[1, 3, None], [2, 2, 4]], "run"),
        ([[0, 1, 0, 1, 0, 1, 0], [1, 1, 1, 2, 2, 2, 3]], "walk"),
    ]
    test = [([[9, 8, 7], [1, 2, 3]], "run")]
    write_ts(tmp_path / "Motion" / "Motion_TRAIN.ts", train, name="Motion")
    write_ts(tmp_path / "Motion" / "Motion_TEST.ts", test, name="Motion")
    task = create_task("ucr", dataset="Motion", data_dir=str(tmp_path), patch_size=2)
    assert task.spec.seq_len == 4 and task.spec.input_dim == 4  # 7 steps -> 4 tokens of 2 steps x 2 channels
    assert task.notes["classes"] == ["run", "walk"] and task.notes["missing_values"] == 1
    assert task.notes["min_length"] == 3 and task.notes["series_length"] == 7
    assert task.train.lengths.tolist() == [3, 2, 4]  # ceil(length / patch)

    batch = task.make_batch(task.train, torch.tensor([0, 1]), None)  # cut to the longest member
    assert batch.x.shape == (2, 3, 4)
    assert batch.mask.tolist() == [[True, True, True], [True, True, False]]
    # case 1: channel 0 is (1, 3, ?): z-normalised over the observed steps, the gap becomes 0
    a, b = znorm([1, 3]), znorm([2, 2, 4])
    token0 = torch.tensor([a[0], b[0], a[1], b[1]], dtype=torch.float32)  # (step, channel) order
    assert torch.allclose(batch.x[1, 0], token0, atol=1e-6)
    assert torch.allclose(batch.x[1, 1], torch.tensor([0.0, b[2], 0.0, 0.0], dtype=torch.float32), atol=1e-6)
    assert torch.equal(batch.x[1, 2], torch.zeros(4))
    assert batch.y[:, 0].tolist() == [1, 0]


@needs_sktime
def test_default_patch_keeps_series_within_64_tokens(tmp_path):
    rng = np.random.default_rng(0)
    for steps, patch, tokens in [(150, 3, 50), (20, 1, 20), (65, 2, 33)]:
        name = f"Len{steps}"
        cases = [([rng.normal(size=steps).tolist()], str(i % 2)) for i in range(4)]
        write_ts(tmp_path / name / f"{name}_TRAIN.ts", cases, name=name)
        write_ts(tmp_path / name / f"{name}_TEST.ts", cases[:2], name=name)
        task = create_task("ucr", dataset=name, data_dir=str(tmp_path))
        assert (task.notes["patch_size"], task.spec.seq_len) == (patch, tokens)


@needs_sktime
def test_mistakes_end_in_one_line(tmp_path, univariate, monkeypatch):
    raises_naming(
        lambda: create_task("ucr", dataset="Nope", data_dir=str(tmp_path)),
        "Nope_TRAIN.ts",
        "Nope_TEST.ts",
        ts.ARCHIVE_URL,
    )
    raises_naming(lambda: create_task("ucr", dataset="Tiny", data_dir=str(univariate), patch_size=0), "--patch-size")
    raises_naming(
        lambda: create_task("ucr", dataset="Tiny", data_dir=str(univariate), patch_size=10**12),
        "--patch-size must be 1 to 6",
    )
    for split in ("TRAIN", "TEST"):
        write_ts(tmp_path / "One" / f"One_{split}.ts", [([[1, 2]], "a"), ([[2, 1]], "a")], name="One")
    raises_naming(lambda: create_task("ucr", dataset="One", data_dir=str(tmp_path)), "every label is a")
    write_ts(tmp_path / "Reg" / "Reg_TRAIN.ts", [([[1, 2]], "0.5")], name="Reg", label_line="@targetLabel true")
    write_ts(tmp_path / "Reg" / "Reg_TEST.ts", [([[1, 2]], "0.5")], name="Reg", label_line="@targetLabel true")
    raises_naming(lambda: create_task("ucr", dataset="Reg", data_dir=str(tmp_path)), "Reg_TRAIN.ts", "regression")
    bad = tmp_path / "Bad"
    write_ts(bad / "Bad_TEST.ts", UNIVARIATE_TEST, name="Bad")
    (bad / "Bad_TRAIN.ts").write_text("@problemName Bad\n@classLabel true 1 2\n@data\n1,2,x,4:1\n")
    raises_naming(
        lambda: create_task("ucr", dataset="Bad", data_dir=str(tmp_path)), "Bad_TRAIN.ts", "not a readable .ts"
    )
    raises_naming(lambda: create_task("ucr", dataset="NoSuchSet"), "NoSuchSet", "GunPoint", "--data-dir")


def test_without_sktime_the_error_names_the_install(univariate, monkeypatch):
    monkeypatch.setitem(sys.modules, "sktime", None)
    monkeypatch.setitem(sys.modules, "sktime.datasets", None)
    raises_naming(lambda: create_task("ucr", dataset="Tiny", data_dir=str(univariate)), "pip install sktime")
    raises_naming(lambda: create_task("ucr"), "pip install sktime")


@needs_sktime
def test_tiny_backbone_trains_and_evaluates_on_masked_series(tmp_path, tiny_backbones):
    train = [([list(np.sin(np.arange(n) * (k + 1)))], str(k)) for k in range(2) for n in (9, 12, 15)]
    write_ts(tmp_path / "Waves" / "Waves_TRAIN.ts", train, name="Waves")
    write_ts(tmp_path / "Waves" / "Waves_TEST.ts", train[:4], name="Waves")
    # a bidirectional encoder, so padding after a series would change its output were it not masked
    config = TrainConfig(
        task="ucr", task_options={"dataset": "Waves", "data_dir": str(tmp_path)}, backbone=tiny_backbones["bert"]
    )
    task, model = build(config)
    result = evaluate(model, task, batch_size=3)
    logits = predict(model, task, batch_size=3)  # batches of series of different lengths, padded
    test = task.evals["test"]
    assert result["examples"] == 4
    assert result["accuracy"] == (logits.argmax(-1)[:, 0] == test.y).float().mean().item()
    model.eval()
    with torch.no_grad():  # padding is masked out: each series alone gives the same logits
        for i in range(len(test)):
            alone = task.make_batch(test, torch.tensor([i]), None)
            assert alone.x.shape[1] == test.lengths[i]
            assert torch.allclose(model(alone.x, alone.mask), logits[i : i + 1], atol=1e-5)


@needs_sktime
def test_bundled_gunpoint_offline():
    assert "GunPoint" in ts.ucr_datasets()
    task = create_task("ucr")  # GunPoint by default, from sktime's own copy
    assert (len(task.train), len(task.evals["test"])) == (50, 150)
    assert task.spec.seq_len == 50 and task.spec.input_dim == 3 and task.spec.num_classes == 2
    x = task.train.x.reshape(50, -1)  # patches of 3 x 50 tokens = the 150 steps
    assert torch.allclose(x.mean(1), torch.zeros(50), atol=1e-5)
    assert torch.allclose(x.std(1, unbiased=False), torch.ones(50), atol=1e-4)
    assert sorted(torch.bincount(task.evals["test"].y).tolist()) == [74, 76]


@needs_sktime
def test_val_size_watches_a_validation_split_carved_from_train():
    whole = create_task("ucr")
    task = create_task("ucr", val_size=10)
    assert task.eval_split == "val" and task.test_splits == ("test",)
    assert (len(task.train), len(task.evals["val"]), len(task.evals["test"])) == (40, 10, 150)
    rows = {tuple(r.tolist()) for r in torch.cat([task.train.x, task.evals["val"].x]).reshape(50, -1)}
    assert rows == {tuple(r.tolist()) for r in whole.train.x.reshape(50, -1)}  # a partition of TRAIN
    with pytest.raises(Exception, match="--val-size"):
        create_task("ucr", val_size=50)


@needs_sktime
def test_bundled_multivariate_uea_sets_load():
    vowels = create_task("ucr", dataset="JapaneseVowels")
    assert vowels.notes["channels"] == 12 and vowels.spec.num_classes == 9 and vowels.variable_length
    assert (len(vowels.train), len(vowels.evals["test"])) == (270, 370)
    motions = create_task("ucr", dataset="BasicMotions")
    assert motions.notes["channels"] == 6 and motions.spec.input_dim == 6 * motions.notes["patch_size"]


@needs_sktime
def test_values_beyond_float32_are_refused_not_turned_into_inf(tmp_path):
    cases = [([[1.0, 2.0, 1e300]], "a"), ([[3.0, 1.0, 2.0]], "b")]
    write_ts(tmp_path / "Big" / "Big_TRAIN.ts", cases, name="Big")
    write_ts(tmp_path / "Big" / "Big_TEST.ts", cases, name="Big")
    raises_naming(lambda: create_task("ucr", dataset="Big", data_dir=str(tmp_path)), "Big_TRAIN.ts", "float32")
