"""Run directories: two writers, temporary files of a killed writer, damaged or crafted files, runs
killed before their first checkpoint or stopped by SIGTERM, the options a resumed run may change.
Each ends in one line, exit status 2, nothing lost."""

from __future__ import annotations

import json
import os
import shutil
import signal

import pytest
import torch
from helpers import one_line_error, train_argv
from safetensors import safe_open
from safetensors.torch import save_file

import fpt.training.lifecycle as training
from fpt.cli import main
from fpt.core.errors import FptError
from fpt.training.checkpoint import load_checkpoint
from fpt.training.run_dir import RunDir


def test_a_second_writer_of_a_run_is_refused(tiny_gpt2, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(train_argv(tiny_gpt2, out, "--steps", "2", "--eval-every", "1")) == 0
    capsys.readouterr()
    holder = RunDir(out)
    holder.lock()  # as another `fpt train --resume` would hold it
    try:
        assert main(["train", "--resume", str(out), "--steps", "4"]) == 2
        assert "in use by another fpt process" in one_line_error(capsys)
    finally:
        holder.unlock()
    assert main(["train", "--resume", str(out), "--steps", "4", "--no-progress"]) == 0


def test_temporary_files_of_a_killed_writer_are_removed_and_ours_are_per_process(tmp_path):
    from fpt.core.paths import temporary_name

    run = RunDir.create(tmp_path / "run")
    run.unlock()
    orphan = tmp_path / "run" / ".checkpoint.safetensors.4242.abcd1234.tmp"  # kill -9 inside a write
    orphan.write_bytes(b"x" * 100)
    run.lock()
    assert not orphan.exists()
    run.unlock()
    assert temporary_name(tmp_path / "a") != temporary_name(tmp_path / "a")
    assert str(os.getpid()) in temporary_name(tmp_path / "a").name


def _rewrite_checkpoint(path, damage):
    with safe_open(str(path), "pt") as handle:
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}
        metadata = handle.metadata()
    damage(tensors, metadata)
    save_file(tensors, str(path), metadata=metadata)


@pytest.mark.parametrize(
    "damage",
    [
        lambda t, m: t.pop(next(k for k in t if k.startswith("param."))),
        lambda t, m: t.update({k: torch.zeros(3) for k in t if k.endswith(".exp_avg")}),
        lambda t, m: t.update({"rng.torch": torch.zeros(7)}),
        lambda t, m: m.update(step="seven"),
        lambda t, m: m.update(param_names='["torn'),
        lambda t, m: m.update(elapsed_s="nan"),
    ],
)
def test_a_damaged_checkpoint_is_refused_in_one_line_naming_it(finished_run, capsys, damage):
    path = finished_run / RunDir.CHECKPOINT
    _rewrite_checkpoint(path, damage)
    assert main(["evaluate", str(finished_run)]) == 2
    assert str(path) in one_line_error(capsys)


@pytest.mark.parametrize("config", ['["a", "list"]', '{"steps": "many"}', '{"dropout": true}', '{"task": '])
def test_a_damaged_config_is_refused_in_one_line_naming_it(finished_run, capsys, config):
    (finished_run / "config.json").write_text(config)
    assert main(["train", "--resume", str(finished_run), "--steps", "3"]) == 2
    assert "config.json" in one_line_error(capsys)


def test_a_torn_last_metrics_line_is_dropped_and_a_torn_middle_one_refused(finished_run, capsys):
    metrics = finished_run / "metrics.jsonl"
    good = metrics.read_text()
    metrics.write_text(good + '{"step": 3, "accur')  # killed while appending
    assert [r["step"] for r in RunDir(finished_run).read_metrics()] == [1, 2]
    metrics.write_text('{"step": 1, "accur\n' + good)
    with pytest.raises(FptError, match="line 1"):
        RunDir(finished_run).read_metrics()


@pytest.mark.parametrize(
    "name, text, command",
    [
        ("summary.json", None, "report"),  # the real summary with a final of 1
        ("summary.json", None, "export-backbone"),  # the real summary with a final accuracy of "x"
        ("evaluation.json", '{"splits": {"test": {"accuracy": 0.5}}}', "report"),
        ("config.json", None, "evaluate"),  # the real config with task_options {"n_bits": "4"}
        ("config.json", '{"task": 5}', "report"),
    ],
)
def test_damaged_run_files_are_one_line_naming_them(finished_run, tmp_path, capsys, name, text, command):
    path = finished_run / name
    if text is None:
        data = json.loads(path.read_text())
        if name == "summary.json" and command == "report":
            data["final"] = 1
        elif name == "summary.json":
            data["final"]["accuracy"] = "x"
        else:
            data["task_options"]["n_bits"] = "4"
        text = json.dumps(data)
    path.write_text(text)
    argv = {
        "report": ["report", str(finished_run)],
        "evaluate": ["evaluate", str(finished_run)],
        "export-backbone": ["export-backbone", str(finished_run), "--out", str(tmp_path / "b.safetensors")],
    }[command]
    assert main(argv) == 2
    error = one_line_error(capsys)
    assert name in error and ("train --resume" in error or "fpt evaluate" in error or name == "config.json")
    assert not (tmp_path / "b.safetensors").exists() and not (finished_run / "report.html").exists()


def test_a_run_killed_before_its_first_checkpoint_resumes_from_step_0(tiny_gpt2, tmp_path):
    straight = tmp_path / "straight"
    assert main(train_argv(tiny_gpt2, straight, "--steps", "4", "--eval-every", "2")) == 0
    killed = tmp_path / "killed"  # as left by kill -9 before step 2: its config and nothing else
    killed.mkdir()
    shutil.copy(straight / "config.json", killed / "config.json")
    assert main(["train", "--resume", str(killed), "--no-progress"]) == 0
    a, b = load_checkpoint(straight / RunDir.CHECKPOINT), load_checkpoint(killed / RunDir.CHECKPOINT)
    assert a.step == b.step == 4
    assert all(torch.equal(a.params[k], b.params[k]) for k in a.params)


def test_a_run_killed_between_its_first_evaluation_and_checkpoint_resumes_from_step_0(tiny_gpt2, tmp_path):
    straight = tmp_path / "straight"
    assert main(train_argv(tiny_gpt2, straight, "--steps", "4", "--eval-every", "2")) == 0
    killed = tmp_path / "killed"
    killed.mkdir()
    shutil.copy(straight / "config.json", killed / "config.json")
    (killed / "metrics.jsonl").write_text((straight / "metrics.jsonl").read_text().splitlines()[0] + "\n")
    assert main(["train", "--resume", str(killed), "--no-progress"]) == 0
    assert [r["step"] for r in RunDir(killed).read_metrics()] == [2, 4]
    a, b = load_checkpoint(straight / RunDir.CHECKPOINT), load_checkpoint(killed / RunDir.CHECKPOINT)
    assert all(torch.equal(a.params[k], b.params[k]) for k in a.params)


def test_sigterm_under_the_cli_is_one_line_exit_143_and_the_run_resumes(tiny_gpt2, tmp_path, capsys, monkeypatch):
    step = training.Trainer.train_step

    def preempted(self):  # SIGTERM arrives while step 3 computes
        if self.step == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return step(self)

    monkeypatch.setattr(training.Trainer, "train_step", preempted)
    out = tmp_path / "run"
    assert main(train_argv(tiny_gpt2, out, "--steps", "6", "--eval-every", "4")) == 128 + signal.SIGTERM
    notice, err = capsys.readouterr().err.strip().splitlines()  # the signal's receipt, then the stop
    assert notice.startswith("fpt: SIGTERM: stopping once the step under way is done") and "Traceback" not in err
    assert err.startswith(
        f"fpt: stopped at step 3 of 6 on SIGTERM, checkpoint saved; continue with `fpt train --resume {out}`"
    ), err
    assert load_checkpoint(out / RunDir.CHECKPOINT).step == 3
    monkeypatch.setattr(training.Trainer, "train_step", step)
    assert main(["train", "--resume", str(out), "--no-progress"]) == 0
    assert json.loads((out / "summary.json").read_text())["resumed_from_step"] == 3


def test_thread_counts_torch_cannot_take_and_a_resume_shorter_than_the_run_are_refused(finished_run, capsys):
    for argv in (
        ["evaluate", str(finished_run), "--threads", "2147483648"],
        ["train", "--resume", str(finished_run), "--threads", "0"],
    ):
        assert main(argv) == 2
        assert "--threads must be 1 to 1024" in one_line_error(capsys)
    assert main(["train", "--resume", str(finished_run), "--steps", "1"]) == 2  # it is at step 2
    assert "at step 2" in one_line_error(capsys)


def test_threads_given_to_evaluate_win_over_the_runs_saved_count(finished_run, monkeypatch):
    import fpt.core.runtime

    config = json.loads((finished_run / "config.json").read_text())
    (finished_run / "config.json").write_text(json.dumps({**config, "threads": 2}))  # as a sweep cell saves it
    counts = []
    monkeypatch.setattr(fpt.core.runtime, "set_threads", counts.append)
    assert main(["evaluate", str(finished_run), "--threads", "1"]) == 0
    assert counts and set(counts) == {1}
    counts.clear()
    assert main(["train", "--resume", str(finished_run), "--threads", "1", "--no-progress"]) == 0
    assert counts and set(counts) == {1}
    # a longer run saves its new length, and only that: the thread count was for this sitting
    assert main(["train", "--resume", str(finished_run), "--threads", "1", "--steps", "3", "--no-progress"]) == 0
    saved = json.loads((finished_run / "config.json").read_text())
    assert saved == {**config, "threads": 2, "steps": 3}


def test_a_baseline_run_has_no_attention_to_plot(tmp_path, capsys):
    out = tmp_path / "lstm"
    assert (
        main(
            [
                "train",
                "--task",
                "bit-xor",
                "--n-bits",
                "4",
                "--eval-size",
                "8",
                "--model",
                "lstm",
                "--steps",
                "1",
                "--batch-size",
                "4",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert main(["attention", str(out)]) == 2
    assert "no attention" in one_line_error(capsys) and not list(out.glob("attention*"))


def test_a_run_inside_another_runs_folder_is_refused(tiny_gpt2, tmp_path, capsys):
    assert main(train_argv(tiny_gpt2, tmp_path / "outer", "--steps", "1")) == 0
    capsys.readouterr()
    nested = tmp_path / "outer" / "more" / "inner"
    assert main(train_argv(tiny_gpt2, nested, "--steps", "1")) == 2
    message = one_line_error(capsys)
    assert "inside the run directory" in message and str(tmp_path / "outer") in message
    assert not (tmp_path / "outer" / "more").exists()
    assert main(train_argv(tiny_gpt2, tmp_path / "beside", "--steps", "1")) == 0  # beside it is fine
