"""--keep-best and --patience: a run ends with the weights of its best whole-split validation
evaluation (lowest MSE, highest accuracy), scores the test split with them, and keeps them across
a resume; --patience stops it once that many evaluations in a row have not beaten the best."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import one_line_error

from fpt.cli import main
from fpt.core.errors import FptError
from fpt.training.build import build
from fpt.training.config import TrainConfig
from fpt.training.evaluation import evaluate
from fpt.training.lifecycle import load_run, resume, train
from fpt.training.loop import Trainer
from fpt.training.run_dir import RunDir


def _config(backbone: str, **changes) -> TrainConfig:
    base = dict(task="bit-xor", backbone=backbone, steps=30, eval_every=5, batch_size=8, lr=3e-3, keep_best=True)
    base["task_options"] = {"n_bits": 5, "eval_size": 64}
    return TrainConfig(**{**base, **changes})


def _spoil_weights_after(step: int, model):
    """An on_step hook that scrambles every trained tensor once, after `step`: the evaluations that
    follow score far below the earlier ones, so the best one is known to lie at or before `step`."""

    def hook(at: int, loss: float) -> None:
        if at == step:
            with torch.no_grad():
                generator = torch.Generator().manual_seed(0)
                for parameter in model.parameters():
                    if parameter.requires_grad:
                        parameter.copy_(torch.randn(parameter.shape, generator=generator) * 5)

    return hook


def _whole_split_rows(run: RunDir) -> list[dict]:
    return [row for row in run.read_metrics() if "accuracy" in row and "[" not in row["split"]]


def test_a_run_ends_with_its_best_evaluations_weights_and_scores_test_with_them(tiny_gpt2, tmp_path):
    config = _config(tiny_gpt2, lr=3e-2)
    task, model = build(dataclasses.replace(config))
    run = RunDir.create(tmp_path / "run")
    run.write_config(dataclasses.asdict(config))
    trainer = Trainer(model, task, config, run, progress=False, on_step=_spoil_weights_after(15, model))
    summary = trainer.fit()

    rows = _whole_split_rows(run)
    assert [row["step"] for row in rows] == [5, 10, 15, 20, 25, 30]  # every evaluation on the whole split
    best = max(rows, key=lambda row: (row["accuracy"], -row["step"]))  # the first of equals
    assert best["step"] <= 15 and rows[-1]["accuracy"] < best["accuracy"]
    assert summary["best_step"] == best["step"] and summary["final"]["accuracy"] == best["accuracy"]
    # the model holds the best weights: val scores as the best evaluation did, test as the summary says
    assert evaluate(model, task, 256)["accuracy"] == best["accuracy"]
    assert summary["test"]["test"]["accuracy"] == evaluate(model, task, 256, split="test")["accuracy"]
    # and so does the run read back (fpt evaluate, predict and export load it this way)
    loaded = load_run(run.path)
    assert evaluate(loaded.model, loaded.task, 256)["accuracy"] == best["accuracy"]


def test_patience_stops_once_that_many_evaluations_missed_the_best(tiny_gpt2, tmp_path):
    config = _config(tiny_gpt2, lr=3e-2, steps=200, patience=2)
    task, model = build(dataclasses.replace(config))
    run = RunDir.create(tmp_path / "run")
    summary = Trainer(model, task, config, run, progress=False, on_step=_spoil_weights_after(15, model)).fit()
    assert summary["status"] == "stopped_early"
    assert summary["step"] == summary["best_step"] + 2 * config.eval_every < 200


def test_a_resumed_keep_best_run_equals_an_unbroken_one(tiny_gpt2, tmp_path):
    config = _config(tiny_gpt2, lr=3e-2)
    unbroken, _ = train(dataclasses.replace(config), tmp_path / "unbroken", progress=False)
    assert unbroken["best_step"] <= 15  # before the break: the resumed half must carry it over
    train(dataclasses.replace(config, steps=15), tmp_path / "broken", progress=False)
    resumed, _ = resume(tmp_path / "broken", steps=30, progress=False)
    for key in ("best_step", "final", "test"):
        assert resumed[key] == unbroken[key], key
    a, b = load_run(tmp_path / "unbroken"), load_run(tmp_path / "broken")
    for (name, x), y in zip(a.model.trainable_state().items(), b.model.trainable_state().values()):
        assert torch.equal(x, y), name


def test_without_keep_best_nothing_changes(tiny_gpt2, tmp_path):
    summary, run_dir = train(_config(tiny_gpt2, keep_best=False, steps=10), tmp_path / "run", progress=False)
    assert "best_step" not in summary and summary["status"] == "completed"
    assert load_run(run_dir).trainer.step == 10


def test_patience_without_keep_best_is_refused_in_one_line(tiny_gpt2, tmp_path, capsys):
    with pytest.raises(FptError, match="--patience needs --keep-best"):
        _config(tiny_gpt2, keep_best=False, patience=3).validate()
    argv = ["train", "--task", "bit-xor", "--backbone", tiny_gpt2, "--patience", "0", "--keep-best"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    assert "--patience needs --keep-best and at least 1" in one_line_error(capsys)
    assert not (tmp_path / "run").exists()


def test_a_run_stopped_early_and_resumed_stays_stopped(tiny_gpt2, tmp_path):
    config = _config(tiny_gpt2, lr=3e-2, steps=200, patience=2)
    task, model = build(dataclasses.replace(config))
    run = RunDir.create(tmp_path / "run")
    run.write_config(dataclasses.asdict(config))
    first = Trainer(model, task, config, run, progress=False, on_step=_spoil_weights_after(15, model)).fit()
    run.unlock()
    run.summary_path.unlink()  # as a damaged summary.json is redone: `fpt train --resume`
    again, _ = resume(run.path, progress=False)
    assert (again["status"], again["step"], again["final"]) == (first["status"], first["step"], first["final"])


def test_keep_best_on_a_task_that_watches_its_test_split_is_refused(tiny_gpt2, monkeypatch):
    """As the image and UCR tasks do without --val-size: the best step would be chosen on test."""
    config = _config(tiny_gpt2)
    task, model = build(dataclasses.replace(config))
    monkeypatch.setattr(type(task), "test_splits", property(lambda self: (self.eval_split,)))
    with pytest.raises(FptError, match="--keep-best picks its step on .* test split"):
        Trainer(model, task, config, progress=False)
    Trainer(model, task, dataclasses.replace(config, keep_best=False), progress=False)  # without it: as before


def test_a_damaged_best_record_is_refused_when_the_checkpoint_is_read(tiny_gpt2, tmp_path):
    import json

    from safetensors.torch import load_file, save_file

    from fpt.training.checkpoint import load_checkpoint

    _, run_dir = train(_config(tiny_gpt2, steps=10), tmp_path / "run", progress=False)
    path = run_dir / RunDir.CHECKPOINT
    tensors = load_file(str(path))
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
    for damaged in (
        {"step": 99, "result": {"accuracy": 1.0}, "evaluations_since": 0},
        {"step": 5, "result": {}, "evaluations_since": 0},
        {"step": True, "result": {"accuracy": 1.0}, "evaluations_since": 0},
    ):
        save_file(tensors, str(path), metadata={**metadata, "best": json.dumps(damaged)})
        with pytest.raises(FptError, match="damaged"):
            load_checkpoint(path)


def test_fpt_evaluate_and_export_of_a_keep_best_run_read_the_best_weights(tiny_gpt2, tmp_path):
    import json

    summary, run_dir = train(_config(tiny_gpt2, lr=3e-2), tmp_path / "run", progress=False)
    assert summary["best_step"] < 30  # the last evaluation was not the best: the two steps differ
    assert main(["evaluate", str(run_dir)]) == 0
    evaluation = json.loads((run_dir / "evaluation.json").read_text())
    assert evaluation["splits"]["heldout"]["accuracy"] == summary["final"]["accuracy"]
    assert main(["export", str(run_dir), "--format", "hf", "--out", str(tmp_path / "hf")]) == 0
    settings = json.loads((tmp_path / "hf" / "config.json").read_text())["fpt"]
    assert settings["run"]["step"] == summary["best_step"]


def test_choosing_a_step_on_a_split_of_a_few_examples_is_warned(tiny_gpt2, tmp_path, capsys):
    import numpy as np

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "small.npz", x=rng.normal(size=(100, 4, 3)).astype(np.float32), y=rng.integers(0, 2, 100))
    argv = ["train", "--task", f"npz:{tmp_path / 'small.npz'}", "--backbone", tiny_gpt2, "--steps", "2"]
    argv += ["--no-progress", "--no-baselines"]
    assert main([*argv, "--keep-best", "--out", str(tmp_path / "chooses")]) == 0  # 10 held out: 10% of 100
    assert "holds 10 examples (one moves its accuracy by 10.0 points): too few" in capsys.readouterr().err
    assert main([*argv, "--out", str(tmp_path / "fixed")]) == 0  # a fixed budget chooses nothing on it
    assert "too few" not in capsys.readouterr().err
