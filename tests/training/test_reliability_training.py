"""A run that fails as it starts or trains: divergence, an exception inside a step, running out of
memory, a batch or a sequence too big, a config of the wrong types; bf16 where the CPU emulates
it; the global RNG left alone. Each ends in one line, exit status 2, nothing half-made."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import torch
from helpers import one_line_error, train_argv

import fpt.training.lifecycle as training
from fpt.cli import main
from fpt.core.errors import DIVERGED, FptError
from fpt.experiments.sweep import FAILURE_RECORD_ENV
from fpt.training.build import build
from fpt.training.checkpoint import load_checkpoint
from fpt.training.config import TrainConfig
from fpt.training.run_dir import RunDir


def test_a_huge_learning_rate_never_keeps_a_non_finite_checkpoint(tiny_gpt2, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    record = tmp_path / "failure.json"  # where a sweep cell records its kind of failure
    monkeypatch.setenv(FAILURE_RECORD_ENV, str(record))
    code = main(train_argv(tiny_gpt2, out, "--lr", "1e30", "--steps", "20", "--eval-every", "1"))
    err = one_line_error(capsys)
    assert code == 2 and "--lr" in err
    assert json.loads(record.read_text())["kind"] == DIVERGED  # a rate search counts it as a lost rate
    if (out / RunDir.CHECKPOINT).is_file():  # whatever was kept is finite, and so is its evaluation
        checkpoint = load_checkpoint(out / RunDir.CHECKPOINT)
        assert all(torch.isfinite(t).all() for t in checkpoint.params.values())
        assert all(np.isfinite(r["loss"]) for r in RunDir(out).read_metrics())
    else:
        assert not out.exists()  # diverged before anything worth keeping: nothing half-made


@pytest.mark.parametrize(
    "error, words",
    [
        (RuntimeError("probability tensor contains either inf, nan or element < 0"), "training failed"),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 99 GB"), "out of memory"),
    ],
)
def test_an_exception_inside_a_step_is_one_line_and_leaves_no_directory(
    tiny_gpt2, tmp_path, capsys, monkeypatch, error, words
):
    def failing(self, batch):
        raise error

    monkeypatch.setattr(training.Trainer, "_backward", failing)  # inside a step
    out = tmp_path / "run"
    assert main(train_argv(tiny_gpt2, out, "--steps", "3")) == 2
    assert words in one_line_error(capsys) and not out.exists()


def test_running_out_of_memory_while_building_a_backbone_says_so(tiny_gpt2, tmp_path, capsys, monkeypatch):
    import transformers

    def no_memory(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(transformers.AutoModel, "from_config", no_memory)
    assert main(train_argv(tiny_gpt2, tmp_path / "run", "--init", "random", "--layers", "5000")) == 2
    assert "not enough memory to build backbone" in one_line_error(capsys) and not (tmp_path / "run").exists()


def test_a_batch_too_big_to_draw_is_one_line_and_leaves_no_directory(tiny_gpt2, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(train_argv(tiny_gpt2, out, "--steps", "1", "--batch-size", str(10**12))) == 2
    assert "--batch-size" in one_line_error(capsys) and not out.exists()


def test_sequences_no_position_table_could_hold_are_one_line(tiny_gpt2, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(train_argv(tiny_gpt2, out, "--steps", "1", "--n-bits", str(10**10))) == 2
    assert "20,000,000,000 tokens" in one_line_error(capsys) and not out.exists()


def test_a_trainer_built_from_python_checks_its_config(tiny_gpt2):
    config = TrainConfig(task="bit-xor", backbone=tiny_gpt2, eval_every=0)
    with pytest.raises(FptError, match="--eval-every must be at least 1"):
        training.Trainer(*build(dataclasses.replace(config, eval_every=1))[::-1], config)


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


def test_a_failed_run_empties_a_folder_the_user_made_but_keeps_it(tiny_gpt2, tmp_path, monkeypatch, capsys):
    def failing(self, batch):
        raise RuntimeError("boom")

    monkeypatch.setattr(training.Trainer, "_backward", failing)
    mine = tmp_path / "mine"
    mine.mkdir()
    assert main(train_argv(tiny_gpt2, mine, "--steps", "2")) == 2
    assert mine.is_dir() and not list(mine.iterdir())


@pytest.mark.parametrize("out", ["default", "nested"])
def test_a_run_failing_on_its_first_step_leaves_no_folder_behind(tiny_gpt2, tmp_path, monkeypatch, capsys, out):
    """Not the run's directory, nor the runs/ (or --out's parents) made for it."""
    monkeypatch.chdir(tmp_path)
    argv = train_argv(tiny_gpt2, tmp_path / "new" / "deeper" / "run", "--lr", "1e30", "--steps", "3")
    if out == "default":  # runs/<task>-<backbone>-<time>
        argv = argv[: argv.index("--out")] + argv[argv.index("--out") + 2 :]
    assert main(argv) == 2
    assert "try a lower --lr" in one_line_error(capsys)
    assert not list(tmp_path.iterdir())


def test_bf16_on_a_cpu_that_emulates_it_is_said_once(monkeypatch, capsys, tiny_gpt2, tmp_path):
    import fpt.core.runtime as runtime

    monkeypatch.setattr(runtime, "native_bf16", lambda: False)
    monkeypatch.setattr(runtime.warn_if_bf16_emulated, "said", False, raising=False)
    runtime.warn_if_bf16_emulated("fp32")
    assert capsys.readouterr().err == ""
    runtime.warn_if_bf16_emulated("bf16")
    runtime.warn_if_bf16_emulated("bf16")
    err = capsys.readouterr().err
    assert err.count("emulated") == 1 and "--precision fp32" in err
    assert "emulated" in runtime.bf16_note()
    monkeypatch.setattr(runtime.warn_if_bf16_emulated, "said", False)
    runtime.warn_if_bf16_emulated("int8-bf16")  # int8 storage, bf16 products: the int8 that computes in fp32
    err = capsys.readouterr().err
    assert "--precision int8-bf16 computes in bf16" in err and err.endswith("use --precision int8 here\n")


@pytest.mark.real_cpu
def test_bf16_detection_reads_the_cpu_flags():
    import fpt.core.runtime as runtime

    runtime.cpu_flags.cache_clear()
    flags = open("/proc/cpuinfo").read().split() if os.path.exists("/proc/cpuinfo") else None
    expected = None if flags is None else bool({"avx512_bf16", "amx_bf16", "bf16"} & set(flags))
    assert runtime.native_bf16() is expected


def test_growing_positions_draws_nothing_from_the_global_rng(tiny_gpt2):
    from fpt.backbones import load_backbone
    from fpt.backbones.surgery import extend_positions

    backbone = load_backbone(tiny_gpt2)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    assert extend_positions(backbone.model, backbone.family, 300) == 128
    assert torch.equal(torch.get_rng_state(), before)  # so the layers a run seeds next do not depend on it
