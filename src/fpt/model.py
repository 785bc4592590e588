"""FrozenPretrainedTransformer = input embedder + backbone body + output head; and the
TrainableModel protocol every model the trainer takes provides."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import nn

from fpt.backbones import Backbone
from fpt.backbones.surgery import check_dropout_rates, compute_dtype, store_frozen_weights
from fpt.errors import FptError
from fpt.policy import GroupRow, apply_policy, classify_backbone, parse_policy
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
        check_pooling(pooling)
        if pooling == "mean" and spec.last_k != 1:
            raise FptError("--pooling mean gives one vector; this task predicts from several tokens, use --pooling last")
        self.spec, self.pooling = spec, pooling
        self.linear = nn.Linear(hidden_size, spec.outputs_per_token * spec.num_classes)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        batch, length, _ = hidden.shape
        if self.pooling == "mean":
            weights = (torch.ones(batch, length, 1, dtype=hidden.dtype, device=hidden.device) if mask is None
                       else mask.unsqueeze(-1).to(hidden.dtype))
            picked = (hidden * weights).sum(1, keepdim=True) / weights.sum(1, keepdim=True).clamp_min(1)
        elif mask is None:
            picked = hidden[:, length - self.spec.last_k:]
        else:  # right padding: the last k real tokens end at each sequence's own length
            ends = mask.sum(1, keepdim=True)
            index = (ends - self.spec.last_k + torch.arange(self.spec.last_k, device=hidden.device)).clamp_min(0)
            picked = hidden.gather(1, index.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
        logits = self.linear(picked)
        return logits.reshape(batch, self.spec.num_outputs, self.spec.num_classes)


def check_pooling(pooling: str) -> str:
    """The one lookup of --pooling."""
    if pooling not in POOLINGS:
        raise FptError(f"unknown --pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
    return pooling


@runtime_checkable
class TrainableModel(Protocol):
    """What the trainer, checkpoints and reports need of a model; the frozen transformer and the
    fully trained baselines (fpt.baselines) both provide it."""

    weights_name: str  # the backbone (or baseline) a checkpoint is bound to
    weights_hash: str  # identity of the frozen (or initial) weights
    group_rows: list[GroupRow]  # parameter counts per group, trained or frozen, for `fpt info`
    extended_positions: tuple[int, int] | None  # (rows published, rows used) if positions grew

    def trainable_state(self) -> dict[str, torch.Tensor]: ...

    def __call__(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor: ...


class FrozenPretrainedTransformer(nn.Module):
    """A backbone body between a new input embedder and a new output head, frozen by a policy.

    The body comes from `load_backbone`, which makes every change a run asks of it (positions
    long enough for the task, dropout rates, checkpointing, compile). `dropout` here is the input
    embedder's. precision "bf16" (or "fp16", GPUs) keeps the frozen weights in 16 bits and runs
    the body under autocast (changes numerics); it is applied here because which weights are
    frozen depends on the policy.
    """

    def __init__(self, backbone: Backbone, spec: TaskSpec, policy: str = "fpt", pooling: str = "last",
                 dropout: float = 0.1, extra_positions: bool = False, precision: str = "fp32"):
        super().__init__()
        if backbone.max_positions is not None and spec.seq_len > backbone.max_positions:
            raise FptError(f"the task is {spec.seq_len} tokens long and backbone {backbone.name!r} has "
                           f"{backbone.max_positions} positions; load it with load_backbone(..., seq_len={spec.seq_len})")
        check_dropout_rates(dropout, None)
        self.spec = spec
        self.backbone_info = backbone
        self.weights_name, self.weights_hash = backbone.name, backbone.weights_hash
        self.extended_positions = backbone.extended_positions
        self.embedder = InputEmbedder(spec, backbone.hidden_size, dropout, extra_positions)
        self.backbone = backbone.model
        self.head = OutputHead(spec, backbone.hidden_size, pooling)
        self.param_groups = self._classify()
        self.group_rows = apply_policy(self.param_groups, self, parse_policy(policy))
        self.compute_dtype = compute_dtype(precision)
        if self.compute_dtype != torch.float32:
            store_frozen_weights(self.backbone, self.compute_dtype)

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
        with torch.autocast(embeds.device.type, dtype=self.compute_dtype, enabled=self.compute_dtype != torch.float32):
            out = self.backbone_info(inputs_embeds=embeds, attention_mask=attention_mask,
                                     output_attentions=output_attentions)
        logits = self.head(out.last_hidden_state.float(), mask)
        return (logits, out.attentions) if output_attentions else logits
