"""What a hostile or unlucky user does: divergence, two writers, damaged run directories, failures
after the directory exists, output paths, bad npz files. Each ends in one line, exit status 2,
nothing half-made and nothing lost."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import fpt.training as training
from fpt.checkpoint import load_checkpoint
from fpt.cli import main
from fpt.config import TrainConfig
from fpt.errors import FptError
from fpt.runs import RunDir


def _args(backbone, out, *more):
    return ["train", "--task", "bit-xor", "--n-bits", "4", "--eval-size", "8", "--backbone", backbone,
            "--batch-size", "4", "--no-progress", "--out", str(out), *more]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("fpt: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


# --- divergence ---------------------------------------------------------------------------------

def test_a_huge_learning_rate_never_keeps_a_non_finite_checkpoint(tiny_gpt2, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(_args(tiny_gpt2, out, "--lr", "1e30", "--steps", "20", "--eval-every", "1"))
    err = _one_line_error(capsys)
    assert code == 2 and "--lr" in err
    if (out / RunDir.CHECKPOINT).is_file():  # whatever was kept is finite, and so is its evaluation
        checkpoint = load_checkpoint(out / RunDir.CHECKPOINT)
        assert all(torch.isfinite(t).all() for t in checkpoint.params.values())
        assert all(np.isfinite(r["loss"]) for r in RunDir(out).read_metrics())
    else:
        assert not out.exists()  # diverged before anything worth keeping: nothing half-made


@pytest.mark.parametrize("error, words", [
    (RuntimeError("probability tensor contains either inf, nan or element < 0"), "training failed"),
    (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 99 GB"), "out of memory"),
])
def test_an_exception_inside_a_step_is_one_line_and_leaves_no_directory(tiny_gpt2, tmp_path, capsys, monkeypatch,
                                                                         error, words):
    def failing(self, batch):
        raise error

    monkeypatch.setattr(training.Trainer, "train_step", failing)
    out = tmp_path / "run"
    assert main(_args(tiny_gpt2, out, "--steps", "3")) == 2
    assert words in _one_line_error(capsys) and not out.exists()


# --- two processes, temporary files ------------------------------------------------------------------

def test_a_second_writer_of_a_run_is_refused(tiny_gpt2, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_args(tiny_gpt2, out, "--steps", "2", "--eval-every", "1")) == 0
    capsys.readouterr()
    holder = RunDir(out)
    holder.lock()  # as another `fpt train --resume` would hold it
    try:
        assert main(["train", "--resume", str(out), "--steps", "4"]) == 2
        assert "in use by another fpt process" in _one_line_error(capsys)
    finally:
        holder.unlock()
    assert main(["train", "--resume", str(out), "--steps", "4", "--no-progress"]) == 0


def test_temporary_files_of_a_killed_writer_are_removed_and_ours_are_per_process(tmp_path):
    from fpt.paths import temporary_name

    run = RunDir.create(tmp_path / "run")
    run.unlock()
    orphan = tmp_path / "run" / ".checkpoint.safetensors.4242.abcd1234.tmp"  # kill -9 inside a write
    orphan.write_bytes(b"x" * 100)
    run.lock()
    assert not orphan.exists()
    run.unlock()
    assert temporary_name(tmp_path / "a") != temporary_name(tmp_path / "a")
    assert str(os.getpid()) in temporary_name(tmp_path / "a").name


# --- damaged or crafted run directories ---------------------------------------------------------------

@pytest.fixture
def finished_run(tiny_gpt2, tmp_path):
    out = tmp_path / "run"
    assert main(_args(tiny_gpt2, out, "--steps", "2", "--eval-every", "1")) == 0
    return out


def _rewrite_checkpoint(path, damage):
    with safe_open(str(path), "pt") as handle:
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}
        metadata = handle.metadata()
    damage(tensors, metadata)
    save_file(tensors, str(path), metadata=metadata)


@pytest.mark.parametrize("damage", [
    lambda t, m: t.pop(next(k for k in t if k.startswith("param."))),
    lambda t, m: t.update({k: torch.zeros(3) for k in t if k.endswith(".exp_avg")}),
    lambda t, m: t.update({"rng.torch": torch.zeros(7)}),
    lambda t, m: m.update(step="seven"),
    lambda t, m: m.update(param_names="[\"torn"),
    lambda t, m: m.update(elapsed_s="nan"),
])
def test_a_damaged_checkpoint_is_refused_in_one_line_naming_it(finished_run, capsys, damage):
    path = finished_run / RunDir.CHECKPOINT
    _rewrite_checkpoint(path, damage)
    assert main(["evaluate", str(finished_run)]) == 2
    assert str(path) in _one_line_error(capsys)


@pytest.mark.parametrize("config", ['["a", "list"]', '{"steps": "many"}', '{"dropout": true}', '{"task": '])
def test_a_damaged_config_is_refused_in_one_line_naming_it(finished_run, capsys, config):
    (finished_run / "config.json").write_text(config)
    assert main(["train", "--resume", str(finished_run), "--steps", "3"]) == 2
    assert "config.json" in _one_line_error(capsys)


def test_a_torn_last_metrics_line_is_dropped_and_a_torn_middle_one_refused(finished_run, capsys):
    metrics = finished_run / "metrics.jsonl"
    good = metrics.read_text()
    metrics.write_text(good + '{"step": 3, "accur')  # killed while appending
    assert [r["step"] for r in RunDir(finished_run).read_metrics()] == [1, 2]
    metrics.write_text('{"step": 1, "accur\n' + good)
    with pytest.raises(FptError, match="line 1"):
        RunDir(finished_run).read_metrics()


def test_a_run_killed_before_its_first_checkpoint_resumes_from_step_0(tiny_gpt2, tmp_path):
    straight = tmp_path / "straight"
    assert main(_args(tiny_gpt2, straight, "--steps", "4", "--eval-every", "2")) == 0
    killed = tmp_path / "killed"  # as left by kill -9 before step 2: its config and nothing else
    killed.mkdir()
    shutil.copy(straight / "config.json", killed / "config.json")
    assert main(["train", "--resume", str(killed), "--no-progress"]) == 0
    a, b = load_checkpoint(straight / RunDir.CHECKPOINT), load_checkpoint(killed / RunDir.CHECKPOINT)
    assert a.step == b.step == 4
    assert all(torch.equal(a.params[k], b.params[k]) for k in a.params)


def test_sigterm_under_the_cli_is_one_line_exit_143_and_the_run_resumes(tiny_gpt2, tmp_path, capsys, monkeypatch):
    step = training.Trainer.train_step

    def preempted(self, batch):  # SIGTERM arrives while step 3 computes
        if self.step == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return step(self, batch)

    monkeypatch.setattr(training.Trainer, "train_step", preempted)
    out = tmp_path / "run"
    assert main(_args(tiny_gpt2, out, "--steps", "6", "--eval-every", "4")) == 128 + signal.SIGTERM
    notice, err = capsys.readouterr().err.strip().splitlines()  # the signal's receipt, then the stop
    assert notice.startswith("fpt: SIGTERM: stopping once the step under way is done") and "Traceback" not in err
    assert err.startswith("fpt: stopped at step 3 of 6 on SIGTERM, checkpoint saved; continue with `fpt train "
                          f"--resume {out}`"), err
    assert load_checkpoint(out / RunDir.CHECKPOINT).step == 3
    monkeypatch.setattr(training.Trainer, "train_step", step)
    assert main(["train", "--resume", str(out), "--no-progress"]) == 0
    assert json.loads((out / "summary.json").read_text())["resumed_from_step"] == 3


# --- output paths -----------------------------------------------------------------------------------

def test_output_paths_that_cannot_be_made_are_refused_before_loading(tiny_gpt2, tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for out, words in ((a_file, "is a file"), (a_file / "run", "which is a file"),
                       (tmp_path / ("n" * 300), "255")):
        assert main(_args("no-such-backbone", out, "--steps", "1")) == 2  # refused before the backbone
        assert words in _one_line_error(capsys)
    assert a_file.read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_read_only_parent_is_refused(tmp_path, capsys):
    parent = tmp_path / "ro"
    parent.mkdir(mode=0o500)
    assert main(_args("no-such-backbone", parent / "run", "--steps", "1")) == 2
    assert "not writable" in _one_line_error(capsys)


def test_export_onto_a_directory_is_refused(finished_run, tmp_path, capsys):
    assert main(["export-backbone", str(finished_run), "--out", str(tmp_path)]) == 2
    assert "is a directory" in _one_line_error(capsys)


def test_a_full_disk_while_checkpointing_keeps_the_last_good_checkpoint(tiny_gpt2, tmp_path, monkeypatch):
    out = tmp_path / "run"
    main(_args(tiny_gpt2, out, "--steps", "2", "--eval-every", "1"))
    before = (out / RunDir.CHECKPOINT).read_bytes()

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("fpt.checkpoint.save_file", full)
    with pytest.raises(FptError, match="No space left on device.*step 2 is kept"):
        training.resume(out, steps=4, progress=False)
    assert (out / RunDir.CHECKPOINT).read_bytes() == before
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_a_closed_stdout_is_not_a_traceback():
    code = f"{sys.executable} -m fpt backbones | head -1"
    result = subprocess.run(code, shell=True, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.stdout.startswith("name") and "Traceback" not in result.stderr, result.stderr


# --- bad npz files ------------------------------------------------------------------------------------

@pytest.mark.parametrize("arrays, words", [
    (dict(x=np.zeros((4, 3), dtype=np.int64), y=np.zeros(4, dtype=np.int64)), "at least two classes"),
    (dict(x=np.zeros((4, 0), dtype=np.int64), y=np.arange(4) % 2), "length 0"),
    (dict(x=np.zeros((4, 3), dtype=np.int64), y=np.arange(4) % 2, mask=np.array([[1, 1, 0]] * 3 + [[0, 0, 0]])),
     "no true token"),
])
def test_npz_files_that_cannot_train_are_refused_before_the_run_directory(tmp_path, capsys, arrays, words):
    np.savez(tmp_path / "d.npz", **arrays)
    out = tmp_path / "run"
    assert main(["train", "--task", f"npz:{tmp_path / 'd.npz'}", "--heldout-fraction", "0.5", "--out", str(out)]) == 2
    assert words in _one_line_error(capsys) and not out.exists()


def test_the_npz_task_without_its_file_is_one_line(tmp_path, capsys):
    assert main(["train", "--task", "npz", "--out", str(tmp_path / "run")]) == 2
    assert "npz:PATH" in _one_line_error(capsys) and not (tmp_path / "run").exists()


@pytest.mark.parametrize("name, text, command", [
    ("summary.json", None, "report"),  # the real summary with a final of 1
    ("summary.json", None, "export-backbone"),  # the real summary with a final accuracy of "x"
    ("evaluation.json", '{"splits": {"test": {"accuracy": 0.5}}}', "report"),
    ("config.json", None, "evaluate"),  # the real config with task_options {"n_bits": "4"}
    ("config.json", '{"task": 5}', "report"),
])
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
    argv = {"report": ["report", str(finished_run)], "evaluate": ["evaluate", str(finished_run)],
            "export-backbone": ["export-backbone", str(finished_run), "--out", str(tmp_path / "b.safetensors")]}[command]
    assert main(argv) == 2
    error = _one_line_error(capsys)
    assert name in error and ("train --resume" in error or "fpt evaluate" in error or name == "config.json")
    assert not (tmp_path / "b.safetensors").exists() and not (finished_run / "report.html").exists()


def test_a_baseline_run_has_no_attention_to_plot(tmp_path, capsys):
    out = tmp_path / "lstm"
    assert main(["train", "--task", "bit-xor", "--n-bits", "4", "--eval-size", "8", "--model", "lstm",
                 "--steps", "1", "--batch-size", "4", "--no-progress", "--out", str(out)]) == 0
    assert main(["attention", str(out)]) == 2
    assert "no attention" in _one_line_error(capsys) and not list(out.glob("attention*"))


def test_thread_counts_torch_cannot_take_and_a_resume_shorter_than_the_run_are_refused(finished_run, capsys):
    for argv in (["evaluate", str(finished_run), "--threads", "2147483648"],
                 ["train", "--resume", str(finished_run), "--threads", "0"]):
        assert main(argv) == 2
        assert "--threads must be 1 to 1024" in _one_line_error(capsys)
    assert main(["train", "--resume", str(finished_run), "--steps", "1"]) == 2  # it is at step 2
    assert "at step 2" in _one_line_error(capsys)


def test_threads_given_to_evaluate_win_over_the_runs_saved_count(finished_run, monkeypatch):
    import fpt.runtime

    config = json.loads((finished_run / "config.json").read_text())
    (finished_run / "config.json").write_text(json.dumps({**config, "threads": 2}))  # as a sweep cell saves it
    counts = []
    monkeypatch.setattr(fpt.runtime, "set_threads", counts.append)
    assert main(["evaluate", str(finished_run), "--threads", "1"]) == 0
    assert counts and set(counts) == {1}
    counts.clear()
    assert main(["train", "--resume", str(finished_run), "--threads", "1", "--no-progress"]) == 0
    assert counts and set(counts) == {1}
    # a longer run saves its new length, and only that: the thread count was for this sitting
    assert main(["train", "--resume", str(finished_run), "--threads", "1", "--steps", "3", "--no-progress"]) == 0
    saved = json.loads((finished_run / "config.json").read_text())
    assert saved == {**config, "threads": 2, "steps": 3}


def test_running_out_of_memory_while_building_a_backbone_says_so(tiny_gpt2, tmp_path, capsys, monkeypatch):
    import transformers

    def no_memory(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(transformers.AutoModel, "from_config", no_memory)
    assert main(_args(tiny_gpt2, tmp_path / "run", "--init", "random", "--layers", "5000")) == 2
    assert "not enough memory to build backbone" in _one_line_error(capsys) and not (tmp_path / "run").exists()


def test_a_batch_too_big_to_draw_is_one_line_and_leaves_no_directory(tiny_gpt2, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_args(tiny_gpt2, out, "--steps", "1", "--batch-size", str(10**12))) == 2
    assert "--batch-size" in _one_line_error(capsys) and not out.exists()


def test_sequences_no_position_table_could_hold_are_one_line(tiny_gpt2, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_args(tiny_gpt2, out, "--steps", "1", "--n-bits", str(10**10))) == 2
    assert "20,000,000,000 tokens" in _one_line_error(capsys) and not out.exists()


def test_a_trainer_built_from_python_checks_its_config(tiny_gpt2):
    config = TrainConfig(task="bit-xor", backbone=tiny_gpt2, eval_every=0)
    with pytest.raises(FptError, match="--eval-every must be at least 1"):
        training.Trainer(*training.build(dataclasses.replace(config, eval_every=1))[::-1], config)


def test_config_types_are_checked_when_read():
    with pytest.raises(FptError, match="steps must be int"):
        TrainConfig.from_dict({"steps": 2.5})
    with pytest.raises(FptError, match="layers must be int or null"):
        TrainConfig.from_dict({"layers": True})
    assert TrainConfig.from_dict(json.loads('{"lr": 1, "layers": null}')).lr == 1
    with pytest.raises(FptError, match="task_options: n_bits must be int"):
        TrainConfig.from_dict({"task_options": {"n_bits": "5"}})
    with pytest.raises(FptError, match="augment must be bool"):
        TrainConfig.from_dict({"task_options": {"augment": 1}})
    # a run records the options it left to the task's default as null
    assert TrainConfig.from_dict({"task_options": {"data_dir": None, "max_len": None}}).task_options["data_dir"] is None


# --- hostile sweep specs ------------------------------------------------------------------------------

# 9^8 = 43 million leaves if expanded; refused at the first nested value instead
ALIAS_BOMB = """grid:
  task: [bit-xor]
  seed: [&a [0, 0, 0, 0, 0, 0, 0, 0, 0], &b [*a, *a, *a, *a, *a, *a, *a, *a, *a],
         &c [*b, *b, *b, *b, *b, *b, *b, *b, *b], &d [*c, *c, *c, *c, *c, *c, *c, *c, *c],
         &e [*d, *d, *d, *d, *d, *d, *d, *d, *d], &f [*e, *e, *e, *e, *e, *e, *e, *e, *e],
         &g [*f, *f, *f, *f, *f, *f, *f, *f, *f], [*g, *g, *g, *g, *g, *g, *g, *g, *g]]
"""


@pytest.mark.parametrize("text, words", [
    (ALIAS_BOMB, "seed must be int"),
    ("grid:\n  task: [bit-xor]\n  seed: *s\n", "not valid YAML"),
    ("grid:\n  task: [bit-xor]\n  seed: " + str(list(range(200))) + "\n  lr: " + str([0.001 * i for i in range(1, 101)]) + "\n",
     "20,000 cells"),
    ("grid:\n  task: [bit-xor]\nparallel: 0\n", "'parallel' must be an integer from 1"),
    ("grid:\n  task: [bit-xor]\nparallel: 100000\n", "'parallel' must be an integer from 1"),
    ("grid:\n  task: [bit-xor]\noptions:\n  steps: many\n", "steps must be int"),
    ("grid:\n  task: [bit-xor]\n  seed: [[0, 1]]\n", "seed must be int"),
    ("grid:\n  task: [bit-xor]\noptions:\n  augment: 3\n", "augment must be bool"),
    ("grid:\n  task: [bit-xor]\noptions: [steps, 5]\n", "'options' must map"),
    ("name: 2024-05-01\ngrid:\n  task: [bit-xor]\n", "'name' must be a string"),
    ("<<: {grid: {task: [bit-xor]}}\n", "not merged in"),
    ("grid:\n  task: [bit-xor]\n  lr: [0.001, -1]\n", "cell task=bit-xor,lr=-1: --lr must be a positive number"),
    ("grid:\n  task: [bit-xor]\noptions:\n  eval_every: 0\n", "--eval-every must be at least 1"),
    ("grid:\n  task: [bit-xor]\noptions:\n  threads: 4294967297\n", "--threads must be 1 to 1024"),
])
def test_hostile_specs_are_refused_in_one_line_before_anything_runs(tmp_path, capsys, text, words):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    assert main(["sweep", str(path), "--out", str(tmp_path / "sweep")]) == 2
    assert words in _one_line_error(capsys) and not (tmp_path / "sweep").exists()


def test_a_directory_a_binary_file_or_a_huge_file_as_spec_is_refused(tmp_path, capsys):
    binary = tmp_path / "spec.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    huge = tmp_path / "huge.yaml"
    huge.write_text("# " + "x" * (2 << 20))
    for spec, words in ((tmp_path, "not a file"), (binary, "not text"), (huge, "a short YAML file")):
        assert main(["sweep", str(spec), "--out", str(tmp_path / "sweep")]) == 2
        assert words in _one_line_error(capsys)


def test_reproduce_bounds_its_numbers(tmp_path, capsys):
    for argv, words in ((["--seeds", "1000000000"], "at most"), (["--parallel", "0"], "--parallel from 1"),
                        (["--set", "steps=many"], "steps must be int"), (["--set", "nope"], "KEY=VALUE"),
                        (["--set", "lr=-1"], "--lr must be a positive number"),
                        (["--set", "dropout=2"], "--dropout must be in [0, 1)"),
                        (["--budget", "50", "--set", "recipe=fast"], "--warmup-steps must be at least 0 and below")):
        assert main(["reproduce", "table1", "--out", str(tmp_path / "r"), *argv]) == 2
        assert words in _one_line_error(capsys)
    assert not (tmp_path / "r").exists()


# --- missing optional packages, corrupt weights ------------------------------------------------------------

def test_a_missing_optional_package_names_its_pip_command(tmp_path, monkeypatch):
    from fpt.data.tape import read_tape_lmdb
    from fpt.experiments.sweep import load_spec

    monkeypatch.setitem(sys.modules, "lmdb", None)
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(FptError, match="pip install lmdb"):
        read_tape_lmdb(tmp_path / "x.lmdb")
    (tmp_path / "spec.yaml").write_text("grid:\n  task: [bit-xor]\n")
    with pytest.raises(FptError, match="pip install pyyaml"):
        load_spec(tmp_path / "spec.yaml")


def test_corrupt_backbone_files_are_named_in_one_line(tmp_path, capsys):
    from conftest import save_tiny

    folder = tmp_path / "bert"
    save_tiny("bert", folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert main(["info", "--backbone", str(folder)]) == 2
    assert "may be damaged or truncated" in _one_line_error(capsys)
    (folder / "config.json").write_text("{not json")
    assert main(["info", "--backbone", str(folder)]) == 2
    assert "cannot read the config" in _one_line_error(capsys)


# --- bf16 where the CPU emulates it -----------------------------------------------------------------

def test_bf16_on_a_cpu_that_emulates_it_is_said_once(monkeypatch, capsys, tiny_gpt2, tmp_path):
    import fpt.runtime as runtime

    monkeypatch.setattr(runtime, "native_bf16", lambda: False)
    monkeypatch.setattr(runtime.warn_if_bf16_emulated, "said", False, raising=False)
    runtime.warn_if_bf16_emulated("fp32")
    assert capsys.readouterr().err == ""
    runtime.warn_if_bf16_emulated("bf16")
    runtime.warn_if_bf16_emulated("bf16")
    err = capsys.readouterr().err
    assert err.count("emulated") == 1 and "--precision fp32" in err
    assert "emulated" in runtime.bf16_note()


def test_bf16_detection_reads_the_cpu_flags():
    import fpt.runtime as runtime

    runtime.native_bf16.cache_clear()
    flags = open("/proc/cpuinfo").read().split() if os.path.exists("/proc/cpuinfo") else None
    expected = None if flags is None else bool({"avx512_bf16", "amx_bf16", "bf16"} & set(flags))
    assert runtime.native_bf16() is expected


# --- review findings kept fixed ---------------------------------------------------------------------------

def test_growing_positions_draws_nothing_from_the_global_rng(tiny_gpt2):
    from fpt.backbones import load_backbone
    from fpt.backbones.surgery import extend_positions

    backbone = load_backbone(tiny_gpt2)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    assert extend_positions(backbone.model, backbone.family, 300) == 128
    assert torch.equal(torch.get_rng_state(), before)  # so the layers a run seeds next do not depend on it


def test_numbers_written_as_text_become_numbers_where_the_option_takes_one(tmp_path):
    from fpt.experiments.reproduce import Reproduction
    from fpt.experiments.sweep import load_spec

    path = tmp_path / "spec.yaml"
    path.write_text("grid:\n  task: [bit-xor]\n  lr: [1e-3, 3e-4]\noptions:\n  grad_clip: 1e0\n")
    spec = load_spec(path)  # YAML 1.1 reads 1e-3 as the text "1e-3"
    assert spec.grid["lr"] == [1e-3, 3e-4] and spec.options["grad_clip"] == 1.0
    plan = Reproduction(["table1"], options={"lr": "1e-3"})
    plan.check()
    assert plan.options["lr"] == 1e-3


def test_cell_keys_under_options_or_set_are_refused(tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text("grid:\n  seed: [0, 1]\noptions:\n  task: bit-xor\n")  # used to end in a KeyError
    assert main(["sweep", str(path), "--out", str(tmp_path / "s")]) == 2
    assert "list it under grid" in _one_line_error(capsys)
    assert main(["reproduce", "table1", "--set", "variant=fpt", "--out", str(tmp_path / "r")]) == 2
    assert "the tables choose it" in _one_line_error(capsys)


def test_a_run_killed_between_its_first_evaluation_and_checkpoint_resumes_from_step_0(tiny_gpt2, tmp_path):
    straight = tmp_path / "straight"
    assert main(_args(tiny_gpt2, straight, "--steps", "4", "--eval-every", "2")) == 0
    killed = tmp_path / "killed"
    killed.mkdir()
    shutil.copy(straight / "config.json", killed / "config.json")
    (killed / "metrics.jsonl").write_text((straight / "metrics.jsonl").read_text().splitlines()[0] + "\n")
    assert main(["train", "--resume", str(killed), "--no-progress"]) == 0
    assert [r["step"] for r in RunDir(killed).read_metrics()] == [2, 4]
    a, b = load_checkpoint(straight / RunDir.CHECKPOINT), load_checkpoint(killed / RunDir.CHECKPOINT)
    assert all(torch.equal(a.params[k], b.params[k]) for k in a.params)


def test_a_failed_run_empties_a_folder_the_user_made_but_keeps_it(tiny_gpt2, tmp_path, monkeypatch, capsys):
    def failing(self, batch):
        raise RuntimeError("boom")

    monkeypatch.setattr(training.Trainer, "train_step", failing)
    mine = tmp_path / "mine"
    mine.mkdir()
    assert main(_args(tiny_gpt2, mine, "--steps", "2")) == 2
    assert mine.is_dir() and not list(mine.iterdir())
