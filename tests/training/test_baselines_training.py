"""The paper's baselines (LSTM, LSTM*, CNN) through the trainer: what trains, resume, bad options."""

import pytest
import torch
from helpers import write_mnist
from safetensors.torch import load_file

from fpt.cli import main
from fpt.training.build import build
from fpt.training.config import TrainConfig


def _trained(model):
    return {n for n, p in model.named_parameters() if p.requires_grad}


# --- baselines through the trainer ------------------------------------------------------------


def test_lstm_trains_every_parameter_and_lstm_frozen_only_its_input_and_head(tmp_path):
    _, full = build(TrainConfig(model="lstm", task="bit-xor", task_options={"eval_size": 8}))
    assert _trained(full) == {n for n, _ in full.named_parameters()}
    _, frozen = build(TrainConfig(model="lstm*-frozen", task="bit-xor", task_options={"eval_size": 8}))
    trained = _trained(frozen)
    assert trained and all(n.startswith(("body.embedder.", "body.head.")) for n in trained)
    assert any(n.startswith("body.embedder.positions") for n in trained)  # LSTM* has positions


@pytest.mark.slow
def test_baseline_run_resumes_bit_identically(tmp_path):
    common = [
        "train",
        "--model",
        "lstm",
        "--task",
        "bit-xor",
        "--eval-size",
        "8",
        "--batch-size",
        "4",
        "--eval-every",
        "2",
        "--no-progress",
    ]
    assert main([*common, "--steps", "4", "--out", str(tmp_path / "whole")]) == 0
    assert main([*common, "--steps", "2", "--out", str(tmp_path / "split")]) == 0
    assert main(["train", "--resume", str(tmp_path / "split"), "--steps", "4", "--no-progress"]) == 0
    whole = load_file(str(tmp_path / "whole" / "checkpoint.safetensors"))
    split = load_file(str(tmp_path / "split" / "checkpoint.safetensors"))
    assert whole.keys() == split.keys() and all(torch.equal(whole[k], split[k]) for k in whole)


def test_cnn_matched_has_about_the_fpt_trained_count(tiny_gpt2, tmp_path):
    for split, n in (("train", 8), ("test", 4)):
        write_mnist(tmp_path / "mnist", split, n)
    config = dict(task="mnist", backbone=tiny_gpt2, task_options={"data_dir": str(tmp_path / "mnist")})
    _, fpt = build(TrainConfig(**config))
    _, cnn = build(TrainConfig(model="cnn-matched", **config))
    target = sum(p.numel() for p in fpt.parameters() if p.requires_grad)
    assert abs(sum(p.numel() for p in cnn.parameters()) - target) / target < 0.1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "lstm", "--precision", "bf16"], "apply to transformer models"),
        (["--model", "lstm", "--pooling", "mean"], "--pooling apply to transformer models"),  # a baseline has no head
        (["--model", "gru"], "unknown --model 'gru'"),
        (["--model", "cnn"], "needs an image task"),
    ],
)
def test_bad_model_options_are_one_line(tmp_path, capsys, argv, message):
    out = tmp_path / "run"
    assert main(["train", "--task", "bit-xor", "--steps", "1", *argv, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err and not out.exists()
