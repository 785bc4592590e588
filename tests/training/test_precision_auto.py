"""--precision auto, the default: bf16 where the device computes it natively, fp32 elsewhere; the
pick said once, written into config.json, and kept by a resume on a machine that would pick otherwise."""

import json

import pytest
import torch
from helpers import train_argv

import fpt.training.build
from fpt.backbones.surgery import auto_precision
from fpt.cli import main
from fpt.training.checkpoint import load_checkpoint
from fpt.training.config import RECIPES, TrainConfig
from fpt.training.distributed import World
from fpt.training.lifecycle import load_run, resume, train
from fpt.training.run_dir import RunDir

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="CPU bf16 needs oneDNN")


def _native(monkeypatch, value):
    monkeypatch.setattr("fpt.core.runtime.native_bf16", lambda: value)
    monkeypatch.setattr("fpt.core.runtime.cpu_model", lambda: "Test CPU 9000")


def _bits(backbone, **overrides) -> TrainConfig:
    options = dict(task="bit-xor", task_options={"n_bits": 8, "eval_size": 50}, backbone=backbone)
    return TrainConfig(**{**options, "steps": 8, "batch_size": 4, "eval_every": 4, **overrides})


@needs_onednn
def test_on_a_cpu_auto_is_bf16_only_where_it_is_native(monkeypatch):
    cpu = torch.device("cpu")
    _native(monkeypatch, False)
    precision, why = auto_precision(cpu)
    assert precision == "fp32" and "Test CPU 9000" in why and "no native bf16" in why
    _native(monkeypatch, None)  # cannot tell: the safe pick
    assert auto_precision(cpu)[0] == "fp32"
    _native(monkeypatch, True)
    assert auto_precision(cpu) == (
        "bf16",
        "this CPU (Test CPU 9000) computes bf16 natively (AVX512-BF16, AMX or Arm BF16)",
    )


def test_on_cuda_auto_is_bf16_from_compute_capability_8_and_mps_stays_fp32(monkeypatch):
    _native(monkeypatch, False)  # the host CPU's answer must not matter on a GPU
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake GPU")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(fpt.training.build, "resolve_device", lambda name="auto": torch.device("cuda:0"))
    config = TrainConfig()
    precision, said = fpt.training.build.resolve_precision(config)
    assert precision == "bf16" and said.startswith("precision auto -> bf16: Fake GPU")
    assert config.precision == "auto"  # the config is left as it was: the plan holds the pick
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))  # a V100: emulated
    assert auto_precision(torch.device("cuda:0"))[0] == "fp32"
    _native(monkeypatch, True)
    assert auto_precision(torch.device("mps"))[0] == "fp32"


def test_explicit_precisions_and_baselines_are_not_picked_for(monkeypatch):
    monkeypatch.setattr("fpt.training.build.auto_precision", lambda device: pytest.fail("picked"))
    for precision in ("fp32", "bf16", "fp16", "int8", "int8-bf16"):
        config = TrainConfig(precision=precision)
        assert fpt.training.build.resolve_precision(config) == (precision, None)
    lstm = TrainConfig.from_recipe("fast", model="lstm")
    assert fpt.training.build.resolve_precision(lstm) == ("fp32", None)  # what a baseline computes in
    lstm.validate()  # and as an old baseline's config.json holds it, it loads
    TrainConfig.from_dict({"model": "lstm", "precision": "fp32"}).validate()


def test_every_rank_takes_rank_0s_pick(monkeypatch):
    monkeypatch.setattr("fpt.training.build.auto_precision", lambda device: pytest.fail("a rank picked alone"))

    class Rank1(World):
        def agree(self, on_main):
            return ("bf16", "rank 0's reason")  # what rank 0 broadcasts

    precision, said = fpt.training.build.resolve_precision(TrainConfig(), Rank1(rank=1, size=2))
    assert precision == "bf16" and "rank 0's reason" in said


def test_the_fast_recipe_says_auto_and_build_resolves_it_silently(tiny_gpt2, monkeypatch, capsys):
    assert RECIPES["fast"]["precision"] == TrainConfig().precision == "auto"
    _native(monkeypatch, False)
    config = TrainConfig.from_recipe("fast", task="bit-xor", task_options={"n_bits": 8}, backbone=tiny_gpt2, steps=200)
    plan, model = fpt.training.build.plan_and_build(config, fpt.training.build.build_task(config))
    assert plan.precision == model.precision == "fp32" and model.compute_dtype == torch.float32
    assert config.precision == "auto"  # resolved in the plan, not in the config given
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("native, picked", [(False, "fp32"), pytest.param(True, "bf16", marks=needs_onednn)])
def test_fpt_train_says_its_pick_once_and_config_json_records_it(
    tiny_gpt2, tmp_path, monkeypatch, capsys, native, picked
):
    _native(monkeypatch, native)
    assert main(train_argv(tiny_gpt2, tmp_path / "run", "--steps", "2", "--eval-every", "1")) == 0
    out = capsys.readouterr().out
    assert out.count("precision auto ->") == 1 and f"precision auto -> {picked}: this CPU (Test CPU 9000)" in out
    assert json.loads((tmp_path / "run" / RunDir.CONFIG).read_text())["precision"] == picked
    assert main(train_argv(tiny_gpt2, tmp_path / "fixed", "--steps", "1", "--precision", "fp32")) == 0
    assert "precision auto" not in capsys.readouterr().out


@needs_onednn
def test_a_resumed_auto_run_keeps_its_recorded_dtype_on_a_machine_that_picks_otherwise(
    tiny_gpt2, tmp_path, monkeypatch
):
    _native(monkeypatch, True)
    train(_bits(tiny_gpt2), out=tmp_path / "straight", progress=False)

    def crash(step, loss):
        if step == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(_bits(tiny_gpt2), out=tmp_path / "moved", progress=False, on_step=crash)
    _native(monkeypatch, False)  # the run moves to a CPU without native bf16
    assert load_run(tmp_path / "moved").model.compute_dtype == torch.bfloat16
    resume(tmp_path / "moved", progress=False)
    assert json.loads((tmp_path / "moved" / RunDir.CONFIG).read_text())["precision"] == "bf16"
    a = load_checkpoint(tmp_path / "straight" / RunDir.CHECKPOINT)
    b = load_checkpoint(tmp_path / "moved" / RunDir.CHECKPOINT)
    assert a.step == b.step == 8 and all(torch.equal(a.params[name], b.params[name]) for name in a.params)
