"""Per-family facts, as data: one `Family` per Hugging Face `model_type`.

Everything fpt needs to know about an architecture lives here (as PEFT keeps its per-model
target modules in one table): which group each parameter belongs to, where the transformer
blocks are, which module is the learned position table, where attention probabilities are
dropped, which way it attends as pretrained and how an encoder is made causal. The mechanics
that use these facts (backbones/, policy.py) are written once.

A family not in the table falls back to searching by module type and name; whatever the
search cannot place is an error that names it, never a silent guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torch import nn

from fpt.core.choices import BIDIRECTIONAL, CAUSAL


@dataclass(frozen=True)
class AttentionDropout:
    """Where a family drops attention probabilities: attribute `attr` of modules whose class name
    ends with `owner_suffix` ("" for any), holding a float rate read per call (`holds_rate`) or
    an nn.Dropout layer."""

    attr: str
    owner_suffix: str = ""
    holds_rate: bool = False


@dataclass(frozen=True)
class CausalSwitch:
    """How an encoder is made causal: config flag `config_key` set True (the model then builds a
    causal mask) and each of `attrs` set True on modules whose class name ends with `owner_suffix`
    (the fused attention reads these flags where it skips the mask)."""

    config_key: str
    owner_suffix: str
    attrs: tuple[str, ...]


@dataclass(frozen=True)
class Family:
    """What fpt knows of one architecture (a Hugging Face model_type): the regexes that put each parameter
    in a group, where its blocks and position table are, where and how its attention dropout is set, which
    way it attends as pretrained, how (if at all) it is made causal, and how its checkpoints are laid out."""

    group_rules: tuple[tuple[str, str], ...]  # ordered (group, regex on the parameter name); first match wins
    blocks: str  # dotted path of the ModuleList of transformer blocks
    position_table: str | None  # dotted path of the learned position nn.Embedding; None: none (RoPE)
    attention_dropout: tuple[AttentionDropout, ...]
    config_dropout_keys: tuple[str, ...]  # config fields holding the attention dropout rate
    attention: str  # which way it attends as pretrained: causal | bidirectional
    causal_switch: CausalSwitch | None = None  # how a bidirectional family is made causal; None: fpt cannot
    # How its checkpoints are laid out, for reading a body's shapes from the files alone (fpt.backbones.shapes):
    # the token table's parameter name (None: no table, a ViT's patches), transformers' base_model_prefix
    # (a checkpoint with a head keeps the body under it), and the buffers older checkpoints saved beside the
    # parameters (a regex on the tensor name; None: none known)
    token_table: str | None = None
    base_prefix: str | None = None
    checkpoint_buffers: str | None = None


FAMILIES: dict[str, Family] = {
    "gpt2": Family(
        group_rules=(
            ("input", r"^wte\."),
            ("position", r"^wpe\."),
            ("layernorm", r"(^|\.)ln_(\d|f)\."),
            ("attention", r"\.attn\."),
            ("feedforward", r"\.mlp\."),
        ),
        blocks="h",
        position_table="wpe",
        attention_dropout=(AttentionDropout("attn_dropout"),),
        config_dropout_keys=("attn_pdrop",),
        attention=CAUSAL,
        token_table="wte.weight",
        base_prefix="transformer",
        checkpoint_buffers=r"\.attn\.(masked_)?bias$",  # the causal mask, in older files (skipped on load)
    ),
    "bert": Family(
        group_rules=(
            ("layernorm", r"LayerNorm\."),
            ("position", r"position_embeddings\."),
            # BERT's token-type table is part of its input layer: fed zeros, it is one learned bias
            ("input", r"(word|token_type)_embeddings\."),
            ("attention", r"\.attention\."),
            ("feedforward", r"\.(intermediate|output)\.dense\."),
            ("output", r"^pooler\."),
        ),
        blocks="encoder.layer",
        position_table="embeddings.position_embeddings",
        attention_dropout=(AttentionDropout("dropout", owner_suffix="SelfAttention"),),
        config_dropout_keys=("attention_probs_dropout_prob",),
        attention=BIDIRECTIONAL,
        # as a BERT decoder: transformers 5 reads is_causal (sdpa, where it skips the mask), 4.x is_decoder
        causal_switch=CausalSwitch("is_decoder", owner_suffix="SelfAttention", attrs=("is_causal", "is_decoder")),
        token_table="embeddings.word_embeddings.weight",
        base_prefix="bert",
        checkpoint_buffers=r"embeddings\.(position_ids|token_type_ids)$",  # index buffers, as in MiniLM's file
    ),
    "llama": Family(
        group_rules=(
            ("input", r"^embed_tokens\."),
            ("layernorm", r"(layernorm|(^|\.)norm)\.weight$"),
            ("attention", r"\.self_attn\."),
            ("feedforward", r"\.mlp\."),
        ),
        blocks="layers",
        position_table=None,  # rotary positions: nothing to train (see --extra-positions)
        attention_dropout=(AttentionDropout("attention_dropout", holds_rate=True),),
        config_dropout_keys=("attention_dropout",),
        attention=CAUSAL,
        token_table="embed_tokens.weight",
        base_prefix="model",
        checkpoint_buffers=r"\.rotary_emb\.inv_freq$",  # the rotary frequencies, in older files
    ),
    "vit": Family(  # as wrapped by fpt.backbones.vit.ViTBody
        group_rules=(
            ("layernorm", r"layernorm(_before|_after)?\."),
            ("position", r"position_embeddings(\.weight)?$"),
            ("input", r"(patch_embeddings|cls_token|mask_token)"),
            ("attention", r"\.attention\."),
            ("feedforward", r"\.(intermediate|output)\.dense\."),
            ("output", r"^pooler\."),
        ),
        blocks="vit.encoder.layer",
        position_table="vit.embeddings.position_embeddings",
        # transformers >= 5 keeps a rate; 4.x a Dropout layer on the self-attention
        attention_dropout=(
            AttentionDropout("attention_dropout", holds_rate=True),
            AttentionDropout("dropout", owner_suffix="SelfAttention"),
        ),
        config_dropout_keys=("attention_probs_dropout_prob",),
        attention=BIDIRECTIONAL,
    ),
}

# The fallback for families not in the table: where blocks and position tables usually are, and
# the words that name attention and feed-forward modules.
_BLOCK_PATHS = ("encoder.layer", "h", "layers", "transformer.h", "encoder.layers")
_ATTENTION_WORDS = ("attn", "attention")
_FEEDFORWARD_WORDS = ("mlp", "ffn", "feed_forward", "feedforward", "intermediate")
_FALLBACK_DROPOUT = (
    AttentionDropout("attention_dropout", holds_rate=True),
    AttentionDropout("attn_dropout"),
    AttentionDropout("dropout", owner_suffix="SelfAttention"),
)
_FALLBACK_CONFIG_KEYS = ("attention_probs_dropout_prob", "attn_pdrop", "attention_dropout")


def group_rules(family: str) -> list[tuple[str, re.Pattern]]:
    """The family's (group, compiled regex on the parameter name) rules in order, the first match winning;
    [] for a family not in the table. A parameter no rule matches falls back to group_by_module_type."""
    known = FAMILIES.get(family)
    return [(group, re.compile(pattern)) for group, pattern in (known.group_rules if known else ())]


def group_by_module_type(module: nn.Module, module_name: str, param_name: str) -> str | None:
    """The fallback: decide a parameter's group from its owning module's type and path."""
    kind = type(module).__name__.lower()
    if isinstance(module, nn.LayerNorm) or "norm" in kind:
        return "layernorm"
    if isinstance(module, nn.Embedding):
        return "position" if "pos" in module_name else "input"
    if "position" in param_name:
        return "position"
    parts = module_name.lower().split(".")
    if any(word in part for part in parts for word in _ATTENTION_WORDS):
        return "attention"
    if any(word in part for part in parts for word in _FEEDFORWARD_WORDS):
        return "feedforward"
    return None


def blocks_path(model: nn.Module, family: str) -> str | None:
    """Dotted path of the ModuleList of transformer blocks (the longest ModuleList as a last resort)."""
    modules = dict(model.named_modules())
    known = FAMILIES.get(family)
    for path in ((known.blocks,) if known else ()) + _BLOCK_PATHS:
        if isinstance(modules.get(path), nn.ModuleList):
            return path
    lists = [(name, m) for name, m in modules.items() if isinstance(m, nn.ModuleList)]
    return max(lists, key=lambda item: len(item[1]))[0] if lists else None


def position_table_path(model: nn.Module, family: str) -> str | None:
    """Dotted path of the learned position table, or None where the family has none."""
    known = FAMILIES.get(family)
    if known is not None:
        return known.position_table
    for name, module in model.named_modules():
        if isinstance(module, nn.Embedding) and ("position" in name or name.endswith("wpe")):
            return name
    return None


def attention_dropout_sites(family: str) -> tuple[tuple[AttentionDropout, ...], tuple[str, ...]]:
    """(where attention probabilities are dropped, the config keys holding that rate)."""
    known = FAMILIES.get(family)
    if known is None:
        return _FALLBACK_DROPOUT, _FALLBACK_CONFIG_KEYS
    return known.attention_dropout, known.config_dropout_keys


def native_attention(family: str) -> str | None:
    """Which way a family attends as pretrained; None where fpt does not know it."""
    known = FAMILIES.get(family)
    return known.attention if known else None


def causal_switch(family: str) -> CausalSwitch | None:
    """How a bidirectional family is made causal; None where it cannot be (or the family is unknown)."""
    known = FAMILIES.get(family)
    return known.causal_switch if known else None
