"""FrozenPretrainedTransformer = input embedder + backbone body + output head."""

from __future__ import annotations

import torch
from torch import nn

from fpt.backbones import Backbone, extend_positions
from fpt.errors import FptError
from fpt.groups import apply_policy, classify_backbone, parse_policy
from fpt.speed import CompiledBackbone, compute_dtype, enable_checkpointing, store_frozen_weights
from fpt.tasks.base import TaskSpec

POOLINGS = ("last", "mean")


class InputEmbedder(nn.Module):
    """Turns task inputs into backbone-sized vectors: a linear patch layer or a token table.

    The linear layer follows the paper: orthogonal init with gain 1.41, zero bias. An optional
    learned position table serves backbones without one of their own (RoPE).
    """

    def __init__(self, spec: TaskSpec, hidden_size: int, dropout: float = 0.1, extra_positions: bool = False):
        super().__init__()
        if spec.vocab_size is not None:
            # Small, like the pretrained tables (std 0.02): an N(0, 1) table would drown the
            # backbone's position embeddings, and tasks like XOR need to know where each bit is.
            self.tokens = nn.Embedding(spec.vocab_size, hidden_size)
            nn.init.normal_(self.tokens.weight, std=0.02)
        else:
            self.linear = nn.Linear(spec.input_dim, hidden_size)
            nn.init.orthogonal_(self.linear.weight, gain=1.41)
            nn.init.zeros_(self.linear.bias)
        self.positions = nn.Embedding(spec.seq_len, hidden_size) if extra_positions else None
        if self.positions is not None:
            nn.init.normal_(self.positions.weight, std=0.02)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tokens(x) if hasattr(self, "tokens") else self.linear(x)
        if self.positions is not None:
            h = h + self.positions.weight[: h.shape[1]]
        return self.dropout(h)


class OutputHead(nn.Module):
    """A linear layer on the last k real tokens (the paper's) or on the masked mean of all tokens."""

    def __init__(self, spec: TaskSpec, hidden_size: int, pooling: str = "last"):
        super().__init__()
        if pooling not in POOLINGS:
            raise FptError(f"unknown --pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
        if pooling == "mean" and spec.last_k != 1:
            raise FptError("--pooling mean gives one vector; this task predicts from several tokens, use --pooling last")
        self.spec, self.pooling = spec, pooling
        self.linear = nn.Linear(hidden_size, spec.outputs_per_token * spec.num_classes)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        batch, length, _ = hidden.shape
        if self.pooling == "mean":
            weights = torch.ones(batch, length, 1, dtype=hidden.dtype) if mask is None else mask.unsqueeze(-1).to(hidden.dtype)
            picked = (hidden * weights).sum(1, keepdim=True) / weights.sum(1, keepdim=True).clamp_min(1)
        elif mask is None:
            picked = hidden[:, length - self.spec.last_k:]
        else:  # right padding: the last k real tokens end at each sequence's own length
            ends = mask.sum(1, keepdim=True)
            index = (ends - self.spec.last_k + torch.arange(self.spec.last_k)).clamp_min(0)
            picked = hidden.gather(1, index.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
        logits = self.linear(picked)
        return logits.reshape(batch, self.spec.num_outputs, self.spec.num_classes)


def check_dropout_rates(dropout: float, attention_dropout: float | None) -> None:
    """Both rates in [0, 1); attention_dropout None means the same as dropout."""
    for name, value in (("dropout", dropout), ("attention-dropout", attention_dropout)):
        if value is not None and not 0.0 <= value < 1.0:
            raise FptError(f"--{name} must be in [0, 1), got {value}")


def set_dropout(backbone: nn.Module, hidden: float, attention: float) -> None:
    """Dropout rates of a backbone: `hidden` for every dropout layer, `attention` on attention
    probabilities (the paper uses 0.1 for both).

    Attention dropout matters for speed: torch's fused CPU attention kernels have no dropout, so
    with it attention runs a plain path that stores batch x heads x length^2 probabilities (ListOps
    at 2000 tokens: gigabytes per layer, several times slower).
    """
    for module in backbone.modules():
        if isinstance(module, nn.Dropout):
            module.p = hidden
    for module in backbone.modules():
        if isinstance(getattr(module, "attention_dropout", None), float):  # Llama, ViT: a rate read per call
            module.attention_dropout = attention
        if isinstance(getattr(module, "attn_dropout", None), nn.Dropout):  # GPT-2
            module.attn_dropout.p = attention
        if type(module).__name__.endswith("SelfAttention") and isinstance(getattr(module, "dropout", None), nn.Dropout):
            module.dropout.p = attention  # BERT: its self-attention's dropout acts on the probabilities
    for key in ("attention_probs_dropout_prob", "attn_pdrop", "attention_dropout"):
        if hasattr(backbone.config, key):
            setattr(backbone.config, key, attention)


class FrozenPretrainedTransformer(nn.Module):
    """A backbone body between a new input embedder and a new output head, frozen by a policy.

    Speed options (see fpt.speed): precision "bf16" keeps frozen weights in bfloat16 and runs the
    backbone under autocast (changes numerics); checkpointing recomputes blocks in backward
    (same numbers, far less memory); compile runs the backbone through torch.compile.
    """

    def __init__(self, backbone: Backbone, spec: TaskSpec, policy: str = "fpt", pooling: str = "last",
                 dropout: float = 0.1, extra_positions: bool = False, precision: str = "fp32",
                 checkpointing: bool = False, compile: bool = False, attention_dropout: float | None = None):
        super().__init__()
        self.extended_positions = None
        if backbone.max_positions is not None and spec.seq_len > backbone.max_positions:
            self.extended_positions = (backbone.max_positions, spec.seq_len)
            extend_positions(backbone, spec.seq_len)
        check_dropout_rates(dropout, attention_dropout)
        self.spec = spec
        self.backbone_info = backbone
        self.embedder = InputEmbedder(spec, backbone.hidden_size, dropout, extra_positions)
        self.backbone = backbone.model
        self.head = OutputHead(spec, backbone.hidden_size, pooling)
        set_dropout(self.backbone, dropout, dropout if attention_dropout is None else attention_dropout)
        self.param_groups = self._classify()
        self.group_rows = apply_policy(self.param_groups, self, parse_policy(policy))
        self.compute_dtype = compute_dtype(precision)
        if self.compute_dtype != torch.float32:
            store_frozen_weights(self.backbone, self.compute_dtype)
        if hasattr(self.backbone.config, "use_cache"):
            self.backbone.config.use_cache = False  # a decoder's key/value cache is never read here
        if checkpointing:
            enable_checkpointing(self.backbone)
        self._compiled = CompiledBackbone(self.backbone) if compile else None  # not a submodule

    def _classify(self) -> dict[str, str]:
        groups = {f"backbone.{k}": g for k, g in classify_backbone(self.backbone, self.backbone_info.family).items()}
        for name, _ in self.embedder.named_parameters():
            groups[f"embedder.{name}"] = "position" if name.startswith("positions.") else "input"
        for name, _ in self.head.named_parameters():
            groups[f"head.{name}"] = "output"
        return groups

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Only what training changes: the parameters that require gradients."""
        return {n: p.detach() for n, p in self.named_parameters() if p.requires_grad}

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, output_attentions: bool = False):
        embeds = self.embedder(x)
        attention_mask = None if mask is None else mask.long()
        with torch.autocast("cpu", dtype=self.compute_dtype, enabled=self.compute_dtype != torch.float32):
            out = (self._compiled or self.backbone)(inputs_embeds=embeds, attention_mask=attention_mask,
                                                    output_attentions=output_attentions)
        logits = self.head(out.last_hidden_state.float(), mask)
        return (logits, out.attentions) if output_attentions else logits
