import json
import os
import signal
import time

import pytest
import torch

from fpt.core import runtime
from fpt.core.errors import FptError, StopRequested
from fpt.training.build import build
from fpt.training.checkpoint import FORMAT, checkpoint_step, load_checkpoint
from fpt.training.config import TrainConfig
from fpt.training.evaluation import evaluate
from fpt.training.lifecycle import load_run, resume, train
from fpt.training.loop import Trainer
from fpt.training.run_dir import RunDir


def _config(backbone, **overrides):
    base = dict(
        task="bit-memory",
        task_options=dict(n_bits=8, n_strings=2, patch_size=4, eval_size=20),
        backbone=backbone,
        steps=10,
        batch_size=4,
        eval_every=5,
        seed=3,
    )
    return TrainConfig(**{**base, **overrides})


def _params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_run_directory_holds_config_metrics_summary_and_a_trainable_only_checkpoint(tiny_gpt2, tmp_path):
    summary, run_dir = train(_config(tiny_gpt2), out=tmp_path / "run", progress=False)
    assert {p.name for p in run_dir.iterdir()} == {
        "config.json",
        "metrics.jsonl",
        "summary.json",
        RunDir.CHECKPOINT,
        RunDir.LOCK,
    }  # the lock file: see RunDir.lock
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [5, 10] and metrics[-1]["examples"] == 20
    assert summary["step"] == 10 and summary["final"]["split"] == "heldout"
    # the test split is scored once, at the end, and never while training
    assert set(summary["test"]) == {"test"} and summary["test"]["test"]["examples"] == 20
    assert all(m["split"] == "heldout" for m in metrics)
    checkpoint = load_checkpoint(run_dir / RunDir.CHECKPOINT)
    _, model = build(_config(tiny_gpt2))
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert set(checkpoint.params) == trained  # nothing frozen is saved
    assert checkpoint.step == 10 and checkpoint.optimizer_state["state"]


def test_checkpoint_round_trip_reproduces_the_model(tiny_gpt2, tmp_path):
    _, run_dir = train(_config(tiny_gpt2), out=tmp_path / "run", progress=False)
    config, task, reloaded, trainer = load_run(run_dir)
    assert trainer.step == 10
    summary = json.loads((run_dir / "summary.json").read_text())
    assert evaluate(reloaded, task)["accuracy"] == summary["final"]["accuracy"]


def test_killed_and_resumed_run_equals_an_uninterrupted_one(tiny_gpt2, tmp_path):
    # dropout stays on (0.1): the resumed run must also restore the RNG state
    uninterrupted, _ = train(_config(tiny_gpt2), out=tmp_path / "straight", progress=False)

    def crash(step, loss):
        if step == 7:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(_config(tiny_gpt2), out=tmp_path / "killed", progress=False, on_step=crash)
    assert load_checkpoint(tmp_path / "killed" / RunDir.CHECKPOINT).step == 5
    resumed, _ = resume(tmp_path / "killed", progress=False)
    assert resumed["resumed_from_step"] == 5
    a = load_checkpoint(tmp_path / "straight" / RunDir.CHECKPOINT)
    b = load_checkpoint(tmp_path / "killed" / RunDir.CHECKPOINT)
    for name in a.params:
        assert torch.equal(a.params[name], b.params[name]), name
    assert resumed["final"] == uninterrupted["final"]
    steps = [json.loads(line)["step"] for line in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [5, 10]


def test_resume_can_extend_a_finished_run(tiny_gpt2, tmp_path):
    train(_config(tiny_gpt2), out=tmp_path / "run", progress=False)
    summary, _ = resume(tmp_path / "run", steps=15, progress=False)
    assert summary["step"] == 15 and load_checkpoint(tmp_path / "run" / RunDir.CHECKPOINT).step == 15


def test_micro_batches_give_the_same_update_as_the_whole_batch(tiny_gpt2):
    results = []
    for micro in (None, 2):
        config = _config(tiny_gpt2, dropout=0.0, micro_batch_size=micro, batch_size=8)
        task, model = build(config)
        trainer = Trainer(model, task, config, progress=False)
        trainer.train_step()  # step 0's batch of 8, the same for both
        results.append(_params(model))
    for name in results[0]:
        assert torch.allclose(results[0][name], results[1][name], atol=1e-6), name


def test_same_seed_same_numbers_and_other_seed_other_numbers(tiny_gpt2, tmp_path):
    a, _ = train(_config(tiny_gpt2), out=tmp_path / "a", progress=False)
    b, _ = train(_config(tiny_gpt2), out=tmp_path / "b", progress=False)
    c, _ = train(_config(tiny_gpt2, seed=4), out=tmp_path / "c", progress=False)
    assert a["final"] == b["final"]
    assert a["final"]["loss"] != c["final"]["loss"]


def test_target_accuracy_stops_early_and_reports_the_step(tiny_gpt2, tmp_path):
    summary, _ = train(_config(tiny_gpt2, steps=50, target_accuracy=0.01), out=tmp_path / "run", progress=False)
    assert summary["status"] == "target_reached" and summary["target_reached_at_step"] == 5 and summary["step"] == 5


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tiny_gpt2, tmp_path, monkeypatch):
    import fpt.training.loop as train_module

    real = train_module.task_loss
    calls = {"n": 0}

    def poisoned(logits, y):
        calls["n"] += 1
        loss = real(logits, y)
        return loss * float("nan") if calls["n"] > 6 else loss

    monkeypatch.setattr(train_module, "task_loss", poisoned)
    with pytest.raises(FptError, match=r"loss became nan at step 7.*checkpoint \(step 5\)"):
        train(_config(tiny_gpt2), out=tmp_path / "run", progress=False)
    assert load_checkpoint(tmp_path / "run" / RunDir.CHECKPOINT).step == 5


@pytest.mark.parametrize(
    "field, value",
    [
        ("steps", -1),
        ("batch_size", 0),
        ("lr", 0.0),
        ("eval_every", 0),
        ("micro_batch_size", 99),
        ("target_accuracy", 2.0),
    ],
)
def test_nonsensical_numbers_are_refused_before_anything_is_written(tiny_gpt2, tmp_path, field, value):
    with pytest.raises(FptError):
        train(_config(tiny_gpt2, **{field: value}), out=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_truncated_checkpoint_is_refused(tiny_gpt2, tmp_path):
    _, run_dir = train(_config(tiny_gpt2), out=tmp_path / "run", progress=False)
    path = run_dir / RunDir.CHECKPOINT
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(FptError, match="corrupt or truncated"):
        resume(run_dir, progress=False)


def test_checkpoint_step_agrees_with_the_checkpoint_and_refuses_bad_files(tiny_gpt2, tmp_path):
    from safetensors.torch import save_file

    _, run_dir = train(_config(tiny_gpt2, steps=4, eval_every=3), out=tmp_path / "run", progress=False)
    path = run_dir / RunDir.CHECKPOINT
    assert checkpoint_step(path) == load_checkpoint(path).step == 4
    header = path.read_bytes()[:20]
    for content, message in [
        (header, "corrupt or truncated"),  # cut inside the header
        ({"step": "3"}, "not an fpt checkpoint"),
        ({"format": FORMAT}, r"damaged \(step None\)"),
        ({"format": FORMAT, "step": "-2"}, "damaged"),
    ]:
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            save_file({"x": torch.zeros(1)}, str(path), metadata=content)
        with pytest.raises(FptError, match=message):
            checkpoint_step(path)
    path.unlink()
    with pytest.raises(FptError, match="no checkpoint at"):
        checkpoint_step(path)


def test_checkpoint_of_another_backbone_is_refused(tiny_backbones, tmp_path):
    from conftest import save_tiny

    _, run_dir = train(_config(tiny_backbones["gpt2"]), out=tmp_path / "run", progress=False)
    # same architecture, different weights, same path: the hash must notice
    save_tiny("gpt2", tiny_backbones["gpt2"] + "-other", seed=99)
    config = json.loads((run_dir / "config.json").read_text())
    config["backbone"] = tiny_backbones["gpt2"] + "-other"
    (run_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(FptError, match="other weights"):
        resume(run_dir, progress=False)


def test_resume_of_a_missing_directory(tmp_path):
    with pytest.raises(FptError, match="does not exist"):
        resume(tmp_path / "nowhere", progress=False)


def test_sigterm_finishes_the_step_saves_and_the_resumed_run_equals_an_uninterrupted_one(tiny_gpt2, tmp_path):
    uninterrupted, _ = train(_config(tiny_gpt2), out=tmp_path / "straight", progress=False)
    before = signal.getsignal(signal.SIGTERM)

    def preempt(step, loss):  # a scheduler's SIGTERM between evaluations (steps 5 and 10)
        if step == 7:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(StopRequested) as stopped:
        train(_config(tiny_gpt2), out=tmp_path / "stopped", progress=False, on_step=preempt)
    assert stopped.value.signum == signal.SIGTERM and "step 7 of 10" in str(stopped.value)
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is fpt's only while it trains
    run = RunDir(tmp_path / "stopped")
    checkpoint = load_checkpoint(run.checkpoint_path)
    assert checkpoint.step == 7 and not run.is_finished  # nothing lost, and not taken for a finished run
    assert checkpoint.elapsed_s > run.read_metrics()[-1]["elapsed_s"]  # the time since the last evaluation is kept
    resumed, _ = resume(tmp_path / "stopped", progress=False)
    assert resumed["resumed_from_step"] == 7 and resumed["final"] == uninterrupted["final"]
    a, b = load_checkpoint(tmp_path / "straight" / RunDir.CHECKPOINT), load_checkpoint(run.checkpoint_path)
    assert all(torch.equal(a.params[name], b.params[name]) for name in a.params)
    records = run.read_metrics()
    assert [r["step"] for r in records] == [5, 10] and records[1]["elapsed_s"] > checkpoint.elapsed_s


def test_a_second_request_made_later_stops_at_once_from_the_last_checkpoint(tiny_gpt2, tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "SAME_REQUEST_S", 0.2)

    def impatient(step, loss):
        if step == 7:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.3)  # pressed again after a while: not the first request echoed
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(KeyboardInterrupt) as interrupted:
        train(_config(tiny_gpt2), out=tmp_path / "run", progress=False, on_step=impatient)
    assert not isinstance(interrupted.value, StopRequested)
    assert load_checkpoint(tmp_path / "run" / RunDir.CHECKPOINT).step == 5


def test_one_ctrl_c_reaching_a_rank_three_times_is_one_request(tiny_gpt2, tmp_path):
    """Under torchrun a terminal's Ctrl-C arrives as SIGINT, torchrun's SIGINT and its SIGTERM:
    the step under way still finishes and is checkpointed, as for a single signal."""

    def ctrl_c(step, loss):
        if step == 7:
            for number in (signal.SIGINT, signal.SIGINT, signal.SIGTERM):
                os.kill(os.getpid(), number)

    with pytest.raises(StopRequested) as stopped:
        train(_config(tiny_gpt2), out=tmp_path / "run", progress=False, on_step=ctrl_c)
    assert stopped.value.signum == signal.SIGINT and "step 7 of 10" in str(stopped.value)
    assert load_checkpoint(tmp_path / "run" / RunDir.CHECKPOINT).step == 7


def test_max_minutes_stops_with_a_checkpoint_and_the_resumed_run_equals_an_uninterrupted_one(tiny_gpt2, tmp_path):
    from fpt.training.stopping import TimeLimitReached

    uninterrupted, _ = train(_config(tiny_gpt2), out=tmp_path / "straight", progress=False)
    with pytest.raises(TimeLimitReached, match="step 1 of 10: --max-minutes 1e-06 reached"):
        train(_config(tiny_gpt2), out=tmp_path / "sitting", progress=False, max_minutes=1e-6)
    run = RunDir(tmp_path / "sitting")
    assert load_checkpoint(run.checkpoint_path).step == 1 and not run.is_finished
    with pytest.raises(TimeLimitReached, match="step 2 of 10"):  # a second sitting, as short
        resume(tmp_path / "sitting", progress=False, max_minutes=1e-6)
    resumed, _ = resume(tmp_path / "sitting", progress=False)
    assert resumed["resumed_from_step"] == 2 and resumed["final"] == uninterrupted["final"]
    a, b = load_checkpoint(tmp_path / "straight" / RunDir.CHECKPOINT), load_checkpoint(run.checkpoint_path)
    assert all(torch.equal(a.params[name], b.params[name]) for name in a.params)


def test_max_minutes_through_the_cli_exits_0_and_a_bad_value_is_one_line(tiny_gpt2, tmp_path, capsys):
    from helpers import one_line_error, train_argv

    from fpt.cli import main

    out = tmp_path / "run"
    assert main(train_argv(tiny_gpt2, out, "--steps", "4", "--max-minutes", "1e-6")) == 0
    assert "--max-minutes 1e-06 reached, checkpoint saved" in capsys.readouterr().err
    assert main(["train", "--resume", str(out), "--no-progress"]) == 0
    assert json.loads((out / "summary.json").read_text())["resumed_from_step"] == 1
    assert main(train_argv(tiny_gpt2, tmp_path / "bad", "--max-minutes", "0")) == 2
    assert "--max-minutes must be a positive number" in one_line_error(capsys) and not (tmp_path / "bad").exists()


def test_a_peer_lost_while_checkpointing_is_one_line_not_a_traceback(tiny_gpt2):
    # a rank killed while the others gather RNG states for a checkpoint (seen in a launcher test's race)
    class LostPeer:
        distributed, is_main = True, False

        def all_gather(self, value):
            raise RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer")

    config = _config(tiny_gpt2)
    task, model = build(config)
    trainer = Trainer(model, task, config, progress=False)
    trainer.world = LostPeer()
    with pytest.raises(FptError, match="another rank stopped while saving a checkpoint at step 0"):
        trainer._checkpoint()


def test_a_signal_during_an_evaluation_stops_it_checkpoints_and_the_resume_makes_it_first(tiny_gpt2, tmp_path):
    config = dict(eval_batch_size=4)  # 5 batches an evaluation: the stop comes between two of them
    uninterrupted, _ = train(_config(tiny_gpt2, **config), out=tmp_path / "straight", progress=False)

    def preempt(step, loss):  # after step 5's update, as its evaluation begins
        if step == 5:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(StopRequested) as stopped:
        train(_config(tiny_gpt2, **config), out=tmp_path / "stopped", progress=False, on_step=preempt)
    assert "step 5 of 10" in str(stopped.value) and "its evaluation of step 5 was not finished" in str(stopped.value)
    run = RunDir(tmp_path / "stopped")
    checkpoint = load_checkpoint(run.checkpoint_path)
    assert checkpoint.step == 5 and checkpoint.pending_evaluation is not None and run.read_metrics() == []
    resumed, _ = resume(tmp_path / "stopped", progress=False)
    straight = RunDir(tmp_path / "straight").read_metrics()

    def scores(records):  # what was measured, not how fast: a resumed evaluation has no steps to time yet
        return [{k: v for k, v in r.items() if not ("_s" in k or "per_" in k or k == "mfu")} for r in records]

    assert scores(run.read_metrics()) == scores(straight)  # step 5's evaluation made first, then step 10's
    assert resumed["final"] == uninterrupted["final"] and resumed["test"] == uninterrupted["test"]
    a, b = load_checkpoint(tmp_path / "straight" / RunDir.CHECKPOINT), load_checkpoint(run.checkpoint_path)
    assert all(torch.equal(a.params[name], b.params[name]) for name in a.params)
    assert b.pending_evaluation is None


def test_a_stop_before_training_begins_ends_the_command_as_a_stopped_run(tiny_gpt2, tmp_path, capsys, monkeypatch):
    from helpers import train_argv

    import fpt.training.build as build_module
    from fpt.cli import main

    real = build_module.create_task

    def signalled(*args, **kwargs):  # Ctrl-C or a sweep's SIGTERM while the task is read
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(build_module, "create_task", signalled)
    before = signal.getsignal(signal.SIGTERM)
    status = main(train_argv(tiny_gpt2, tmp_path / "run", "--steps", "4"))
    assert status == 128 + signal.SIGTERM  # not killed by the default handler: the sweep's "stopped"
    assert "SIGTERM: stopped" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_sitting_that_ends_says_the_test_split_waits_and_which_step_keep_best_holds(tiny_gpt2, tmp_path):
    from fpt.training.stopping import TimeLimitReached

    config = _config(tiny_gpt2, eval_every=1, keep_best=True)
    with pytest.raises(TimeLimitReached) as ended:
        train(config, out=tmp_path / "run", progress=False, max_minutes=1e-6)
    assert "the test split is scored once the run ends" in str(ended.value)
    assert "--keep-best holds step 1's weights" in str(ended.value)


def test_epochs_set_the_steps_from_the_training_examples_and_say_so(tiny_gpt2, tmp_path, capsys):
    import numpy as np
    from helpers import one_line_error

    from fpt.cli import main

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(100, 4, 3)).astype(np.float32), y=rng.integers(0, 2, 100))
    argv = ["train", "--task", f"npz:{tmp_path / 'd.npz'}", "--backbone", tiny_gpt2, "--no-progress", "--no-baselines"]
    assert main([*argv, "--epochs", "2", "--batch-size", "16", "--out", str(tmp_path / "run")]) == 0
    assert "--epochs 2 -> 12 steps (90 training examples, batch 16)" in capsys.readouterr().out  # 10% held out
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["steps"], config["epochs"]) == (12, 2.0)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["step"] == 12
    for more, words in (
        (["--epochs", "2", "--steps", "5"], "give one of them, not both"),
        (["--epochs", "0"], "--epochs must be a positive number"),
    ):
        assert main([*argv, *more, "--out", str(tmp_path / "bad")]) == 2
        assert words in one_line_error(capsys)
    assert (
        main(["train", "--task", "bit-xor", "--epochs", "1", "--backbone", tiny_gpt2, "--out", str(tmp_path / "x")])
        == 2
    )
    assert "draws fresh examples every step" in one_line_error(capsys) and not (tmp_path / "x").exists()
    assert main(["train", "--resume", str(tmp_path / "run"), "--steps", "14", "--no-progress"]) == 0  # constant rate
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["steps"], config["epochs"]) == (14, None)  # the length given now, no longer the epochs'


def test_a_config_asks_one_budget_and_a_plans_config_json_runs_its_steps(tiny_gpt2, tmp_path, capsys):
    """Steps and epochs together are refused from Python as on the command line; a run's config.json, which
    records the epochs asked beside the steps they came to, runs those steps again as a --config file, and a
    budget given on the command line replaces the file's."""
    import numpy as np
    from helpers import one_line_error

    from fpt.cli import main

    with pytest.raises(FptError, match="give one of them, not both"):
        TrainConfig(task="bit-xor", backbone=tiny_gpt2, steps=5, epochs=2.0).validate()
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(40, 4, 3)).astype(np.float32), y=rng.integers(0, 2, 40))
    argv = ["train", "--backbone", tiny_gpt2, "--no-progress", "--no-baselines"]
    task = ["--task", f"npz:{tmp_path / 'd.npz'}", "--batch-size", "8"]
    assert main([*argv, *task, "--epochs", "2", "--out", str(tmp_path / "first")]) == 0  # 36 examples: 9 steps
    capsys.readouterr()
    plan = str(tmp_path / "first" / "config.json")
    assert main([*argv, "--config", plan, "--out", str(tmp_path / "again")]) == 0
    assert json.loads((tmp_path / "again" / "summary.json").read_text())["step"] == 9
    assert main([*argv, "--config", plan, "--steps", "3", "--out", str(tmp_path / "short")]) == 0
    assert json.loads((tmp_path / "short" / "config.json").read_text())["epochs"] is None
    assert json.loads((tmp_path / "short" / "summary.json").read_text())["step"] == 3
    capsys.readouterr()
    assert main([*argv, "--config", plan, "--steps", "3", "--epochs", "1", "--out", str(tmp_path / "both")]) == 2
    assert "give one of them, not both" in one_line_error(capsys) and not (tmp_path / "both").exists()
    (tmp_path / "mine.yaml").write_text(f"task: npz:{tmp_path / 'd.npz'}\nsteps: 3\nepochs: 1\n")  # not a run's plan
    assert main([*argv, "--config", str(tmp_path / "mine.yaml"), "--out", str(tmp_path / "mine")]) == 2
    assert "give one of them, not both" in one_line_error(capsys) and not (tmp_path / "mine").exists()


def test_without_steps_a_run_takes_100_passes_over_its_examples_at_most_2000_steps(tiny_gpt2, tmp_path, capsys):
    import dataclasses

    import numpy as np

    from fpt.training.build import resolve_steps

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x=rng.normal(size=(20, 4, 3)).astype(np.float32), y=np.arange(20) % 2)
    config = TrainConfig.from_recipe(
        "fast", task=f"npz:{tmp_path / 'd.npz'}", backbone=tiny_gpt2, batch_size=32, baselines=False
    )
    assert config.steps is None and config.warmup_steps == 100  # the fast recipe's warm-up, longer than the run
    summary, path = train(config, out=tmp_path / "run", progress=False)
    said = capsys.readouterr().out
    assert "57 steps: 100 passes over 18 training examples at batch 32" in said  # 10% held out
    assert "warm-up 5 steps" in said and "2 of 20 examples held out to evaluate on while training" in said
    recorded = json.loads((path / "config.json").read_text())
    assert (summary["step"], recorded["steps"], recorded["warmup_steps"]) == (57, 57, 5)

    class Big:  # a task of many examples: the default stops at 2,000 steps and says so
        name, train = "big", range(10**6)

    capped, line = resolve_steps(dataclasses.replace(config, batch_size=8), Big())
    assert capped.steps == 2000
    assert "the default's most (100 passes over 1,000,000 training examples at batch 8 would take 12,500,000)" in line

    class Fresh:  # a task that draws fresh examples every step has no passes: 2,000 steps
        name, notes = "fresh", {}

    assert resolve_steps(config, Fresh())[0].steps == 2000
    given = dataclasses.replace(config, steps=7)
    assert resolve_steps(given, Big()) == (given, None)  # --steps given: kept, nothing said


def test_a_run_is_one_frozen_plan_and_the_config_given_is_left_as_it_was(tiny_gpt2, tmp_path):
    import dataclasses

    config = TrainConfig.from_recipe(
        "fast", task="bit-xor", task_options={"n_bits": 4}, backbone=tiny_gpt2, steps=3, warmup_steps=1
    )
    given = dataclasses.asdict(config)
    _, run_dir = train(config, out=tmp_path / "run", progress=False)
    assert dataclasses.asdict(config) == given  # precision auto, the pooling, the task's defaults: not filled in here
    plan = load_run(run_dir).config
    recorded = json.loads((run_dir / "config.json").read_text())
    assert dataclasses.asdict(plan) == recorded and recorded["precision"] != "auto" and recorded["pooling"]
    assert recorded["task_options"]["eval_size"] == 1000  # the task's default, recorded
    with pytest.raises(dataclasses.FrozenInstanceError, match="a run's plan is frozen"):
        plan.steps = 10
    assert dataclasses.replace(plan, steps=10).steps == 10  # a changed copy is a new config


def test_a_resumed_run_whose_last_evaluation_was_interrupted_ends_with_it_made_and_no_longer_pending(
    tiny_gpt2, tmp_path
):
    def preempt(step, loss):  # as the last step's evaluation begins
        if step == 10:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(StopRequested, match="its evaluation of step 10 was not finished"):
        train(_config(tiny_gpt2, eval_batch_size=4), out=tmp_path / "run", progress=False, on_step=preempt)
    resumed, _ = resume(tmp_path / "run", progress=False)
    assert resumed["step"] == 10 and [r["step"] for r in RunDir(tmp_path / "run").read_metrics()] == [5, 10]
    # the checkpoint its made evaluation wrote says nothing is pending: a later resume does not make it again
    assert load_checkpoint(tmp_path / "run" / RunDir.CHECKPOINT).pending_evaluation is None
