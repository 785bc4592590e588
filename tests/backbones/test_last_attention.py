"""The last-attention group: the last block's attention, trainable alone (the paper's "finetuning more")."""

from fpt.backbones import load_backbone
from fpt.models.policy import classify_backbone, parse_policy
from fpt.training.build import build
from fpt.training.config import TrainConfig


def _trained(model):
    return {n for n, p in model.named_parameters() if p.requires_grad}


# --- last attention layer ---------------------------------------------------------------------


def test_last_attention_is_the_last_blocks_attention_only(tiny_backbones):
    groups = classify_backbone(load_backbone(tiny_backbones["gpt2"]).model, "gpt2")
    last = {n for n, g in groups.items() if g == "last-attention"}
    assert last and all(n.startswith("h.1.attn.") for n in last)
    assert all(g == "attention" for n, g in groups.items() if n.startswith("h.0.attn."))
    assert "last-attention" in parse_policy("attention,output")  # "attention" means every block's


def test_fpt_plus_last_attention_trains_exactly_one_more_attention_block(tiny_gpt2):
    _, more = build(TrainConfig(backbone=tiny_gpt2, policy="fpt+last-attention"))
    _, ff = build(TrainConfig(backbone=tiny_gpt2, policy="fpt+feedforward"))
    extra = _trained(more) - _trained(ff)
    assert extra and all(n.startswith("backbone.h.1.attn.") for n in extra)
    assert not any(".attn." in n and ".h.0." in n for n in _trained(more))
