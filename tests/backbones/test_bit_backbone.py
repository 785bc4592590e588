"""The Bit variant: a backbone fully trained on Bit Memory, exported, then loaded with --init bit."""

import json

import pytest
import torch
from safetensors.torch import load_file

from fpt.backbones import bit_backbone_path, load_backbone
from fpt.cli import main


def _trained(model):
    return {n for n, p in model.named_parameters() if p.requires_grad}


# --- the Bit variant: a backbone fully trained on Bit Memory, exported, then frozen -----------------


def test_export_a_bit_memory_run_then_init_bit_loads_exactly_those_weights(tiny_gpt2, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FPT_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(Exception, match="fpt export-backbone"):  # not made yet: the error says how
        load_backbone(tiny_gpt2, init="bit")
    run = tmp_path / "bit"
    assert (
        main(
            [
                "train",
                "--task",
                "bit-memory",
                "--backbone",
                tiny_gpt2,
                "--init",
                "random",
                "--policy",
                "full",
                "--n-bits",
                "20",
                "--patch-size",
                "5",
                "--eval-size",
                "8",
                "--steps",
                "3",
                "--eval-every",
                "3",
                "--out",
                str(run),
                "--no-progress",
            ]
        )
        == 0
    )
    assert main(["export-backbone", str(run)]) == 0
    path = bit_backbone_path(tiny_gpt2)
    assert path.is_file() and "--init bit" in capsys.readouterr().out

    trained = load_file(str(run / "checkpoint.safetensors"))
    bit = load_backbone(tiny_gpt2, init="bit")
    random = load_backbone(tiny_gpt2, init="random")
    state = bit.model.state_dict()
    name = "h.0.attn.c_attn.weight"  # trained by the full policy: must be the run's, not the init's
    assert torch.equal(state[name], trained[f"param.backbone.{name}"])
    assert not torch.equal(state[name], random.model.state_dict()[name])
    assert bit.weights_hash != random.weights_hash

    # a frozen FPT run on top of it, as the paper's "Bit" row
    assert (
        main(
            [
                "train",
                "--task",
                "bit-xor",
                "--backbone",
                tiny_gpt2,
                "--init",
                "bit",
                "--steps",
                "2",
                "--eval-size",
                "8",
                "--out",
                str(tmp_path / "on-bit"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "on-bit" / "config.json").read_text())["init"] == "bit"

    path.write_bytes(path.read_bytes()[:100])  # truncated
    assert main(["info", "--backbone", tiny_gpt2, "--init", "bit"]) == 2
    assert "truncated" in capsys.readouterr().err


def test_export_refuses_a_run_without_a_default_place(tiny_gpt2, tmp_path, capsys):
    run = tmp_path / "xor"
    assert (
        main(
            [
                "train",
                "--task",
                "bit-xor",
                "--backbone",
                tiny_gpt2,
                "--steps",
                "1",
                "--eval-size",
                "8",
                "--out",
                str(run),
                "--no-progress",
            ]
        )
        == 0
    )
    assert main(["export-backbone", str(run)]) == 2
    assert "give --out" in capsys.readouterr().err
    assert main(["export-backbone", str(run), "--out", str(tmp_path / "b.safetensors")]) == 0


def test_bit_weights_of_another_architecture_are_refused(tiny_backbones, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FPT_CACHE_DIR", str(tmp_path / "cache"))
    from fpt.backbones import export_backbone

    export_backbone(load_backbone(tiny_backbones["bert"]).model, bit_backbone_path(tiny_backbones["gpt2"]), {})
    assert main(["info", "--backbone", tiny_backbones["gpt2"], "--init", "bit"]) == 2
    assert "does not hold" in capsys.readouterr().err
