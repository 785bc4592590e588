"""Recipes and what they set: the learning-rate schedule, evaluation on a fixed subset in between,
a validation split carved from the training images, and elapsed time counted across resumes."""

import json
import math

import pytest
import torch
from helpers import raises_naming, write_mnist

from fpt.cli import main
from fpt.tasks import create_task
from fpt.training.checkpoint import load_checkpoint
from fpt.training.config import RECIPES, TrainConfig, recipe_defaults
from fpt.training.lifecycle import resume, train
from fpt.training.loop import learning_rate
from fpt.training.run_dir import RunDir


def _bits(backbone, **overrides) -> TrainConfig:
    return TrainConfig(
        **{
            **dict(
                task="bit-xor",
                task_options={"n_bits": 8, "eval_size": 50},
                backbone=backbone,
                steps=8,
                batch_size=4,
                eval_every=4,
            ),
            **overrides,
        }
    )


def test_warm_up_then_cosine_decay_reaches_zero_at_the_last_step():
    config = TrainConfig(lr=1e-2, lr_schedule="cosine", warmup_steps=4, steps=14)
    rates = [learning_rate(config, step) for step in range(config.steps + 1)]
    assert rates[:4] == pytest.approx([2.5e-3, 5e-3, 7.5e-3, 1e-2])
    assert rates[4] == pytest.approx(1e-2) and rates[9] == pytest.approx(5e-3)  # half-way down
    assert rates[14] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in zip(rates[4:], rates[5:]))
    assert {learning_rate(TrainConfig(lr=3e-4), s) for s in (0, 5, 1000)} == {3e-4}  # the paper's: constant


def test_a_killed_run_with_a_cosine_schedule_resumes_exactly(tiny_gpt2, tmp_path):
    config = dict(lr_schedule="cosine", warmup_steps=2)
    train(_bits(tiny_gpt2, **config), out=tmp_path / "straight", progress=False)

    def crash(step, loss):
        if step == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(_bits(tiny_gpt2, **config), out=tmp_path / "killed", progress=False, on_step=crash)
    resume(tmp_path / "killed", progress=False)
    a = load_checkpoint(tmp_path / "straight" / RunDir.CHECKPOINT)
    b = load_checkpoint(tmp_path / "killed" / RunDir.CHECKPOINT)
    assert all(torch.equal(a.params[name], b.params[name]) for name in a.params)


def test_evaluations_in_between_use_a_named_subset_and_the_end_the_whole_split(tiny_gpt2, tmp_path):
    _, run_dir = train(_bits(tiny_gpt2, eval_subset=20), out=tmp_path / "run", progress=False)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["split"], r["examples"]) for r in records] == [(4, "heldout[:20]", 20), (8, "heldout", 50)]


def test_a_target_reached_on_the_subset_is_confirmed_on_the_whole_split(tiny_gpt2, tmp_path):
    summary, run_dir = train(
        _bits(tiny_gpt2, eval_subset=20, target_accuracy=0.01), out=tmp_path / "run", progress=False
    )
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["split"]) for r in records] == [(4, "heldout[:20]"), (4, "heldout")]
    assert summary["target_reached_at_step"] == 4 and summary["final"]["examples"] == 50


def test_elapsed_time_counts_from_step_0_across_a_resume(tiny_gpt2, tmp_path):
    def crash(step, loss):
        if step == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(_bits(tiny_gpt2), out=tmp_path / "run", progress=False, on_step=crash)
    first = json.loads((tmp_path / "run" / "metrics.jsonl").read_text())["elapsed_s"]
    resume(tmp_path / "run", progress=False)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["elapsed_s"] == first and records[1]["elapsed_s"] > first


def test_a_recipe_fills_only_the_options_not_given_and_is_recorded(tiny_gpt2, tmp_path, monkeypatch):
    monkeypatch.setattr("fpt.core.runtime.native_bf16", lambda: True)
    assert recipe_defaults("fast")["precision"] == "auto"  # the same on every machine; picked when built
    assert (
        main(
            [
                "train",
                "--task",
                "bit-xor",
                "--n-bits",
                "8",
                "--eval-size",
                "20",
                "--backbone",
                tiny_gpt2,
                "--recipe",
                "fast",
                "--lr",
                "5e-4",
                "--steps",
                "2",
                "--warmup-steps",
                "1",
                "--eval-every",
                "2",
                "--precision",
                "fp32",
                "--out",
                str(tmp_path / "run"),
                "--no-progress",
            ]
        )
        == 0
    )
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    fast = RECIPES["fast"]
    assert config["recipe"] == "fast" and config["lr"] == 5e-4  # the flag wins
    assert (config["lr_schedule"], config["warmup_steps"], config["batch_size"], config["dropout"]) == (
        fast["lr_schedule"],
        1,
        fast["batch_size"],
        0.0,
    )


@pytest.mark.parametrize(
    "options, words",
    [
        (dict(recipe="slow"), ["unknown --recipe 'slow'", "paper or fast"]),
        (dict(lr_schedule="step"), ["unknown --lr-schedule 'step'"]),
        (dict(warmup_steps=-1), ["--warmup-steps must be at least 0"]),
        (dict(eval_subset=0), ["--eval-subset must be at least 1"]),
    ],
)
def test_bad_schedule_options_are_one_line(options, words):
    raises_naming(TrainConfig(**options).validate, *words)


def test_a_validation_split_is_carved_from_training_the_same_for_every_seed(tmp_path):
    train_images, _ = write_mnist(tmp_path / "mnist", "train", 60, seed=1)
    write_mnist(tmp_path / "mnist", "test", 10, seed=2)
    plain = create_task("mnist", data_dir=str(tmp_path / "mnist"))
    task = create_task("mnist", data_dir=str(tmp_path / "mnist"), val_size=15)
    assert plain.eval_split == "test" and task.eval_split == "val" and set(task.eval_splits) == {"val", "test"}
    assert len(task.train) == 45 and len(task.evals["val"]) == 15 and len(task.evals["test"]) == 10
    rows = lambda split: {bytes(row.numpy().tobytes()) for row in split.x}  # noqa: E731
    assert not rows(task.train) & rows(task.evals["val"])
    assert rows(task.train) | rows(task.evals["val"]) == rows(plain.train)
    again = create_task("mnist", data_dir=str(tmp_path / "mnist"), val_size=15)
    assert torch.equal(again.evals["val"].x, task.evals["val"].x)
    raises_naming(lambda: create_task("mnist", data_dir=str(tmp_path / "mnist"), val_size=60), "--val-size", "59")
    assert math.isclose(len(task.train) / len(plain.train), 0.75)


def test_a_kill_while_confirming_a_target_resumes_into_the_same_run(tiny_gpt2, tmp_path, monkeypatch):
    config = dict(eval_subset=20, target_accuracy=0.01)
    straight, _ = train(_bits(tiny_gpt2, **config), out=tmp_path / "straight", progress=False)
    import fpt.training.loop as training  # the loop's own evaluate

    real = training.evaluate

    def killed_on_the_whole_split(*args, limit=None, **kwargs):
        if limit is None:
            raise KeyboardInterrupt
        return real(*args, limit=limit, **kwargs)

    monkeypatch.setattr(training, "evaluate", killed_on_the_whole_split)
    with pytest.raises(KeyboardInterrupt):
        train(_bits(tiny_gpt2, **config), out=tmp_path / "killed", progress=False)
    assert not RunDir(tmp_path / "killed").read_metrics()  # nothing of step 4 was kept
    monkeypatch.setattr(training, "evaluate", real)
    resumed, _ = resume(tmp_path / "killed", progress=False)
    assert resumed["target_reached_at_step"] == straight["target_reached_at_step"] == 4
    a = load_checkpoint(tmp_path / "straight" / RunDir.CHECKPOINT)
    b = load_checkpoint(tmp_path / "killed" / RunDir.CHECKPOINT)
    assert a.step == b.step == 4 and all(torch.equal(a.params[n], b.params[n]) for n in a.params)


def test_a_subset_of_a_length_bucketed_split_is_its_first_examples_not_its_shortest(tmp_path):
    import numpy as np

    from fpt.tasks.bucketing import LengthBucketedTask
    from fpt.training.evaluation import evaluate

    class Reader(torch.nn.Module):  # answers 0 for every example, noting the length of each it reads
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))
            self.lengths: list[int] = []

        def forward(self, x, mask):
            self.lengths += mask.sum(1).tolist()
            return torch.zeros(len(x), 1, 2)

    rng = np.random.default_rng(0)
    lengths = np.array([9, 2, 7, 1, 8, 3, 6, 4, 5, 10])
    x = rng.integers(1, 20, (10, 10))
    mask = np.arange(10)[None, :] < lengths[:, None]
    np.savez(tmp_path / "rows.npz", x=x, y=np.arange(10) % 2, mask=mask)
    np.savez(tmp_path / "test.npz", x=x, y=np.arange(10) % 2, mask=mask)
    task = LengthBucketedTask(create_task(f"npz:{tmp_path / 'rows.npz'}", test_path=str(tmp_path / "test.npz")), 2)
    reader = Reader()
    result = evaluate(reader, task, batch_size=2, limit=4)
    assert sorted(reader.lengths) == sorted(lengths[:4].tolist()) and result["split"].endswith("[:4]")


def test_a_cosine_run_is_not_stretched_on_resume(tiny_gpt2, tmp_path):
    train(_bits(tiny_gpt2, lr_schedule="cosine"), out=tmp_path / "run", progress=False)
    raises_naming(lambda: resume(tmp_path / "run", steps=16, progress=False), "decays to 0 at step 8", "--steps 16")


def test_baselines_and_trained_bodies_keep_their_dropout_under_a_recipe(monkeypatch):
    monkeypatch.setattr("fpt.core.runtime.native_bf16", lambda: True)
    config = TrainConfig.from_recipe("fast", task="mnist", model="lstm")
    assert config.precision == TrainConfig().precision and config.lr == RECIPES["fast"]["lr"]
    assert config.dropout == TrainConfig().dropout  # no dropout suits a frozen body, not a trained one
    config.validate()
    for trains_body_weights in ("full", "fpt+feedforward", "input,output,last-attention"):
        assert (
            TrainConfig.from_recipe("fast", task="mnist", policy=trains_body_weights).dropout == TrainConfig().dropout
        )
    for frozen_body in ("fpt", "output-only", "input,output,layernorm"):
        assert TrainConfig.from_recipe("fast", task="mnist", policy=frozen_body).dropout == 0.0
