"""The controls that ask whether the pretrained transformer does anything (Tan et al., "Are Language
Models Actually Useful for Time Series Forecasting?", NeurIPS 2024): `--body` says what sits
between the input layer and the head.

- backbone: the backbone's own blocks, frozen by the policy (fpt itself).
- none: nothing but the positions ("w/o LLM").
- attention: one freshly initialised multi-head self-attention layer of the backbone's width and
  head count, with a residual connection and a layer norm after it, as Tan et al.'s ("LLM2Attn").
- block: one freshly initialised block of the backbone's own architecture (its config built with
  one layer, at the architecture's default init: "LLM2Trsf").

Every control keeps the backbone's own learned position table (the rows it was loaded with, grown
to the task as fpt grows them) and its layer norms outside the blocks (BERT's embedding norm before
them, GPT-2's and Llama's final norm after them, with their loaded weights, trained as fpt trains
them; `block` keeps every tensor outside the blocks), so that a control differs from fpt only in
its blocks. A rotary
backbone (Llama) has no table: there `block` keeps its rotary positions, and `none` and
`attention`, which would otherwise know no order at all, get a fresh learned table of one row per
task token. A control trains every parameter it has; it attends the way the backbone does (or as
--attention says). The blocks are built here; `load_backbone(body=...)` makes the swap.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fpt.backbones.families import CAUSAL, blocks_path
from fpt.backbones.surgery import is_norm, position_table
from fpt.core.choices import BACKBONE, BODIES
from fpt.core.errors import FptError

SMALL_BODIES = ("none", "attention")  # built here, not by transformers


def check_body(body: str, layers: int | None = None, policy: str | None = None) -> None:
    """--body (the one module that checks it, and --layers): a name of BODIES; a control replaces every block,
    so it keeps none (--layers) and trains every parameter it has (a --policy for the blocks is moot)."""
    if body not in BODIES:
        raise FptError(f"unknown --body {body!r}; choose one of {', '.join(BODIES)}")
    if body != BACKBONE and layers is not None:
        raise FptError(
            f"--body {body} replaces all the backbone's blocks, and --layers keeps some of them: leave --layers unset"
        )
    if body != BACKBONE and policy not in (None, "fpt", "full"):
        raise FptError(
            f"--body {body} trains every parameter it has (its layers are fresh); "
            f"--policy {policy} is for the backbone's own blocks: leave --policy unset"
        )


def control_positions(model: nn.Module, family: str, body: str, seq_len: int | None) -> nn.Embedding | None:
    """The learned position table a control keeps (None: the backbone has none), once the control is possible."""
    from fpt.backbones.vit import ViTBody  # imports transformers, which `fpt info` counting from files does not

    if isinstance(model, ViTBody):
        raise FptError(
            f"--body {body}: fpt rebuilds a ViT's embeddings around its blocks; use a language "
            "backbone (minilm, gpt2, ...) for the controls"
        )
    table = position_table(model, family)
    if table is None and body != "block" and seq_len is None:
        raise FptError(
            f"--body {body} on a backbone without a learned position table adds one, as long as the "
            "task: give load_backbone(..., seq_len=N)"
        )
    return table


class SelfAttentionLayer(nn.Module):
    """Multi-head self-attention, then dropout, the residual and a layer norm (post-norm, as Tan
    et al.'s LLM2Attn layer). Padding keys are masked; `causal` lets each token see only itself
    and those before it. The attention dropout is a rate read on every call."""

    def __init__(
        self, hidden: int, heads: int, causal: bool, dropout: float, attention_dropout: float, eps: float = 1e-5
    ):
        super().__init__()
        self.heads, self.causal, self.attention_dropout = heads, causal, attention_dropout
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.output = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, h: torch.Tensor, attention_mask: torch.Tensor | None = None, output_attentions: bool = False):
        """Hidden states (B, L, hidden) and a (B, L) mask (1 real, 0 padding) -> (states (B, L, hidden), the
        attention weights (B, heads, L, L) if `output_attentions`, else None)."""
        batch, length, hidden = h.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, length, self.heads, -1).transpose(1, 2)

        q, k, v = heads(self.query(h)), heads(self.key(h)), heads(self.value(h))
        # right padding: every query row keeps key 0, a real token, so no row is all masked
        allowed = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        if self.causal:
            order = torch.ones(length, length, dtype=torch.bool, device=h.device).tril()
            allowed = order if allowed is None else allowed & order
        rate = self.attention_dropout if self.training else 0.0
        weights = None
        if output_attentions:  # the fused kernel does not return its weights
            scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
            if allowed is not None:
                scores = scores.masked_fill(~allowed, float("-inf"))
            weights = scores.softmax(-1)
            context = F.dropout(weights, rate, self.training) @ v
        else:
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=rate)
        out = self.output(context.transpose(1, 2).reshape(batch, length, hidden))
        return self.norm(h + self.dropout(out)), weights


@dataclass
class BodyOutput:
    """What a body returns, as transformers' BaseModelOutput (imported lazily elsewhere: not here,
    where `fpt --help` would pay for importing transformers)."""

    last_hidden_state: torch.Tensor
    attentions: tuple[torch.Tensor, ...] | None = None


class ControlBody(nn.Module):
    """The body of `--body none` or `--body attention`: positions added to the input vectors,
    dropout, then no layer or one `SelfAttentionLayer`. Called as a backbone is (inputs_embeds,
    attention_mask), it returns last_hidden_state (and the attention maps when asked). `config`
    is the backbone's, with the layer count of this body, for whoever reads a body's config."""

    supports_gradient_checkpointing = False

    def __init__(
        self,
        config,
        positions: nn.Embedding,
        layer: SelfAttentionLayer | None,
        dropout: float,
        norms: OuterNorms | None = None,
    ):
        super().__init__()
        self.config = config
        self.positions = positions
        norms = norms or OuterNorms()
        self.entry_norm, self.exit_norm = norms.entry, norms.exit  # None where the backbone has none
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList([] if layer is None else [layer])

    def set_attn_implementation(self, name: str) -> None:
        """As a transformers model's (fpt attention asks for "eager"): the weights are returned when
        asked whatever the kernel, so there is nothing to switch."""

    def forward(
        self,
        inputs_embeds: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
        **_,
    ) -> BodyOutput:
        """Input vectors (B, L, hidden), L at most the position table's rows, and a (B, L) padding mask ->
        BodyOutput: last_hidden_state (B, L, hidden), and with `output_attentions` one (B, heads, L, L) map per
        layer (none for --body none). Other keyword arguments a backbone takes are ignored."""
        length = inputs_embeds.shape[1]
        h = inputs_embeds + self.positions.weight[:length].to(inputs_embeds.dtype)
        h = self.dropout(h if self.entry_norm is None else self.entry_norm(h))
        maps = []
        for layer in self.layers:
            h, weights = layer(h, attention_mask, output_attentions)
            maps.append(weights)
        if self.exit_norm is not None:
            h = self.exit_norm(h)
        return BodyOutput(last_hidden_state=h, attentions=tuple(maps) if output_attentions else None)


@dataclass
class OuterNorms:
    """The layer norms a backbone has outside its blocks: `entry` before them (BERT's embedding
    norm), `exit` after them (GPT-2's ln_f, Llama's final norm); None where it has none."""

    entry: nn.Module | None = None
    exit: nn.Module | None = None


def outer_norms(model: nn.Module, family: str) -> OuterNorms:
    """Copies of `model`'s norms outside its blocks, with their loaded weights: a norm inside its
    embeddings module comes before the blocks, any other after them (a norm applied before them
    elsewhere, as CLIP's pre_layrnorm, is refused: there would be two "after")."""
    blocks = blocks_path(model, family)
    found = OuterNorms()
    for name, module in model.named_modules():
        if not is_norm(module) or (blocks and name.startswith(blocks + ".")):
            continue
        side = "entry" if "embed" in name else "exit"
        if getattr(found, side) is not None:
            where = "before" if side == "entry" else "after"
            raise FptError(f"--body: backbone family {family!r} has two norms {where} its blocks; use --body block")
        setattr(found, side, copy.deepcopy(module))
    return found


def copy_outside_blocks(source: nn.Module, target: nn.Module, family: str) -> None:
    """Give `target` (a fresh one-block model of `source`'s architecture, --body block) every
    tensor `source` holds outside its blocks under the same name and shape: its position table,
    embedding and final norms, BERT's token-type vector, so that the two differ in their blocks."""
    blocks = blocks_path(source, family) + "."
    own = target.state_dict()
    with torch.no_grad():
        for name, tensor in source.state_dict().items():
            if not name.startswith(blocks) and name in own and own[name].shape == tensor.shape:
                own[name].copy_(tensor)


def control_groups(body: ControlBody) -> dict[str, str]:
    """The parameter groups of a ControlBody: its table is "position", its norms (the attention
    layer's, the backbone's outer ones) "layernorm", the rest of it "attention"."""
    groups = {}
    for name, _ in body.named_parameters():
        if name.startswith("positions."):
            groups[name] = "position"
        elif ".norm." in name or name.startswith(("entry_norm.", "exit_norm.")):
            groups[name] = "layernorm"
        else:
            groups[name] = "attention"
    return groups


def fresh_position_table(rows: int, hidden: int) -> nn.Embedding:
    """A learned table for a body with no learned positions, small as pretrained tables are (std 0.02)."""
    table = nn.Embedding(rows, hidden)
    nn.init.normal_(table.weight, std=0.02)
    return table


def set_layer_count(config, layers: int) -> None:
    """The config's block count (and per-layer lists, where a family keeps them) set to `layers`."""
    for key in ("num_hidden_layers", "n_layer"):
        if hasattr(config, key):
            setattr(config, key, layers)
    kinds = getattr(config, "layer_types", None)
    if isinstance(kinds, list):
        config.layer_types = kinds[:layers]


def small_body(
    body: str,
    config,
    positions: nn.Embedding,
    causal: bool,
    dropout: float,
    attention_dropout: float,
    norms: OuterNorms | None = None,
) -> ControlBody:
    """The ControlBody of `body` (none | attention) around `positions` and the backbone's outer
    `norms`; the new layer draws its weights from the global RNG (the caller seeds it)."""
    hidden = config.hidden_size
    heads = getattr(config, "num_attention_heads", None)
    layer = None
    if body == "attention":
        if not isinstance(heads, int) or heads < 1 or hidden % heads:
            raise FptError(
                f"--body attention needs the backbone's head count to divide its width ({hidden}); "
                f"its config says {heads!r} heads: use --body block or another backbone"
            )
        eps = next(
            (
                getattr(config, k)
                for k in ("layer_norm_eps", "layer_norm_epsilon", "rms_norm_eps")
                if isinstance(getattr(config, k, None), float)
            ),
            1e-5,
        )
        layer = SelfAttentionLayer(hidden, heads, causal, dropout, attention_dropout, eps)
    config = copy.deepcopy(config)
    set_layer_count(config, 0 if layer is None else 1)
    return ControlBody(config, positions, layer, dropout, norms)


def causal_control(direction: str | None, family: str) -> bool:
    """Whether a control's attention is causal: as the backbone attends (--attention, or as
    pretrained); refused where fpt does not know which way that is."""
    if direction is None:
        raise FptError(
            f"--body attention: fpt does not know which way backbone family {family!r} attends; "
            "give --attention causal or --attention bidirectional"
        )
    return direction == CAUSAL


def describe_body(body: str, model: nn.Module, positions: str) -> str:
    """`fpt info`'s line on what a control is and what it trains (`positions`: where its positions come from)."""
    config = model.config
    if body == BACKBONE:
        return ""
    kept = [
        name
        for name, norm in (
            ("embedding", getattr(model, "entry_norm", None)),
            ("final", getattr(model, "exit_norm", None)),
        )
        if norm is not None
    ]
    norms = f"; kept from the backbone: its {' and '.join(kept)} layer norm" if kept else ""
    if body == "none":
        what = "no layer between the input layer and the head"
    elif body == "attention":
        layer = model.layers[0]
        what = (
            f"one freshly initialised self-attention layer ({config.hidden_size} wide, {layer.heads} heads, "
            f"{'causal' if layer.causal else 'bidirectional'}; residual and layer norm)"
        )
    else:
        what = f"one freshly initialised {config.model_type} block"
    return f"body {body}: {what}{norms}; positions: {positions}; every parameter trained"
