import pytest
import torch
from torch import nn

from fpt.backbones import load_backbone
from fpt.core.errors import FptError
from fpt.models.policy import GROUPS, POLICIES, classify_backbone, parse_policy
from fpt.models.transformer import FrozenPretrainedTransformer
from fpt.tasks import create_task
from fpt.training.config import TrainConfig
from fpt.training.loop import Trainer

FAMILIES = ("gpt2", "bert", "llama")


@pytest.mark.parametrize("family", FAMILIES)
def test_every_parameter_gets_a_group(tiny_backbones, family):
    backbone = load_backbone(tiny_backbones[family])
    groups = classify_backbone(backbone.model, backbone.family)
    assert set(groups) == {n for n, _ in backbone.model.named_parameters()}
    assert set(groups.values()) <= set(GROUPS)
    # every family has layer norms, attention and feed-forward weights; none may be missed
    assert {"layernorm", "attention", "feedforward"} <= set(groups.values())


def test_family_rules_put_known_names_in_the_right_group(tiny_backbones):
    gpt2 = classify_backbone(load_backbone(tiny_backbones["gpt2"]).model, "gpt2")
    assert gpt2["wpe.weight"] == "position"
    assert gpt2["h.0.ln_1.weight"] == "layernorm" and gpt2["ln_f.bias"] == "layernorm"
    assert gpt2["h.0.attn.c_attn.weight"] == "attention"
    assert gpt2["h.1.mlp.c_proj.weight"] == "feedforward"
    bert = classify_backbone(load_backbone(tiny_backbones["bert"]).model, "bert")
    assert bert["encoder.layer.0.attention.output.dense.weight"] == "attention"
    assert bert["encoder.layer.0.attention.output.LayerNorm.weight"] == "layernorm"
    assert bert["encoder.layer.0.output.dense.weight"] == "feedforward"
    assert bert["embeddings.position_embeddings.weight"] == "position"
    llama = classify_backbone(load_backbone(tiny_backbones["llama"]).model, "llama")
    assert llama["norm.weight"] == "layernorm" and llama["layers.1.post_attention_layernorm.weight"] == "layernorm"
    assert llama["layers.0.self_attn.k_proj.weight"] == "attention"
    assert llama["layers.0.mlp.gate_proj.weight"] == "feedforward"


def test_unclassified_parameter_is_an_error_that_names_it():
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.mystery = nn.Linear(3, 3)

    with pytest.raises(FptError, match="mystery.weight"):
        classify_backbone(Odd(), "unknown-family")


def test_fallback_classifies_an_unknown_family_by_module_type():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.Linear(4, 4)
            self.mlp = nn.Linear(4, 4)
            self.norm = nn.LayerNorm(4)

    groups = classify_backbone(Block(), "some-new-family")
    assert groups["attn.weight"] == "attention" and groups["mlp.bias"] == "feedforward"
    assert groups["norm.weight"] == "layernorm"


def test_parse_policy():
    assert parse_policy("fpt") == {"input", "output", "layernorm", "position"}
    assert parse_policy("full") == set(GROUPS)
    assert parse_policy("input, output,feedforward") == {"input", "output", "feedforward"}
    with pytest.raises(FptError, match="bogus"):
        parse_policy("output,bogus")
    with pytest.raises(FptError):
        parse_policy("")


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("policy", ["fpt", "output+layernorm", "input,output,feedforward"])
def test_only_policy_groups_train_and_frozen_weights_stay_bit_identical(tiny_backbones, family, policy):
    task = create_task("bit-memory", n_bits=8, n_strings=2, patch_size=4, eval_size=4)
    model = FrozenPretrainedTransformer(
        load_backbone(tiny_backbones[family]), task.spec, policy=policy, extra_positions=family == "llama"
    )
    trained_groups = parse_policy(policy)
    before = _snapshot(model)
    trainer = Trainer(model, task, TrainConfig(lr=1e-2), progress=False)
    for step in range(3):
        batch = task.train_batch(step, 4, seed=0)
        trainer.optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(batch.x).reshape(-1, 2), batch.y.reshape(-1))
        loss.backward()
        for name, param in model.named_parameters():
            assert (param.grad is not None) == (model.param_groups[name] in trained_groups), name
        trainer.optimizer.step()
    for name, param in model.named_parameters():
        changed = not torch.equal(param, before[name])
        if model.param_groups[name] in trained_groups:
            continue  # trained: free to move (most do; a few may get zero gradient)
        assert not changed, f"frozen {name} changed"
    moved = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert moved and all(model.param_groups[n] in trained_groups for n in moved)


def test_policy_table_counts_every_parameter(tiny_backbones):
    task = create_task("bit-xor")
    model = FrozenPretrainedTransformer(load_backbone(tiny_backbones["gpt2"]), task.spec)
    rows = {r.group: r for r in model.group_rows}
    assert sum(r.params for r in rows.values()) == sum(p.numel() for p in model.parameters())
    assert {g for g, r in rows.items() if r.trained} == set(POLICIES["fpt"])
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trained == sum(r.params for r in rows.values() if r.trained)
