"""The trained ends every model shares, and what the trainer asks of a model.

`InputEmbedder` (task inputs -> backbone-sized vectors) and `OutputHead` (hidden states -> logits)
sit around the frozen transformer's body and the LSTM baselines' alike; `TrainableModel` is the
protocol the trainer, checkpoints and reports need. They live below `fpt.models.transformer` so that the
baselines and evaluation need neither the backbones' loading nor the tasks; `fpt.models.transformer` re-exports
every name here.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
import torch.nn.functional as F
from torch import nn

from fpt.core.choices import POOLINGS
from fpt.core.errors import FptError
from fpt.models.policy import GroupRow
from fpt.tasks.spec import TaskSpec


class InputEmbedder(nn.Module):
    """Turns task inputs into backbone-sized vectors: a linear patch layer or a token table.

    The linear layer follows the paper: orthogonal init with gain 1.41, zero bias. An optional
    learned position table serves backbones without one of their own (RoPE). A series task's raw
    windows are cut into overlapping patches here (`patches`), so that a model takes windows as
    they are and its users never patch by hand.
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
        self.patch_stride = spec.patch_stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Task inputs -> (B, L, hidden) vectors: windows patched first, tokens looked up or vectors projected,
        positions added if the embedder has its own, then dropout."""
        if self.patch_stride is not None:
            x = patches(x, self.linear.in_features, self.patch_stride)
        h = self.tokens(x) if hasattr(self, "tokens") else self.linear(x)
        if self.positions is not None:
            h = h + self.positions.weight[: h.shape[1]]
        return self.dropout(h)


def patches(x: torch.Tensor, size: int, stride: int) -> torch.Tensor:
    """Windows (B, T) -> patches (B, series_tokens(T, size, stride), size): every `size` steps
    `stride` apart, the window first extended by `stride` copies of its last value so that its
    end is a patch too (One Fits All's and PatchTST's ReplicationPad1d)."""
    padded = F.pad(x.unsqueeze(1), (0, stride), mode="replicate").squeeze(1)
    return padded.unfold(-1, size, stride)


class WindowScale:
    """Per-window normalisation (RevIN without its learned affine, as One Fits All uses it): each
    input window to mean 0 and std 1, and the model's outputs mapped back to the window's scale,
    so that a series' level and spread need not be learned by the few trained weights."""

    EPS = 1e-5  # One Fits All's: a flat window divides by sqrt(1e-5), not by 0

    def __init__(self, x: torch.Tensor):
        self.mean = x.mean(dim=1, keepdim=True).detach()
        self.std = torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + self.EPS).detach()

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Each input window at mean 0 and std 1, by the statistics taken at construction."""
        return (x - self.mean) / self.std

    def restore(self, outputs: torch.Tensor) -> torch.Tensor:
        """Outputs (B, num_outputs, 1) in the window's own units."""
        return outputs * self.std.unsqueeze(-1) + self.mean.unsqueeze(-1)


def default_pooling(spec: TaskSpec) -> str:
    """The head a task gets when --pooling is not given: a forecast reads every token (flattened,
    as One Fits All and PatchTST do), everything else the paper's last token(s)."""
    return "flatten" if spec.regression and spec.patch_stride is not None else "last"


class OutputHead(nn.Module):
    """A linear layer on the last k real tokens (the paper's), on the masked mean of all tokens, or
    on all tokens' states side by side ("flatten": a forecast's horizon reads the whole window)."""

    def __init__(self, spec: TaskSpec, hidden_size: int, pooling: str = "last"):
        super().__init__()
        check_pooling(pooling)
        if pooling == "mean" and spec.last_k != 1:
            raise FptError(
                "--pooling mean gives one vector; this task predicts from several tokens, use --pooling last"
            )
        self.spec, self.pooling = spec, pooling
        if pooling == "flatten":
            self.linear = nn.Linear(spec.seq_len * hidden_size, spec.num_outputs * spec.num_classes)
        else:
            self.linear = nn.Linear(hidden_size, spec.outputs_per_token * spec.num_classes)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Hidden states (B, L, hidden) and the padding mask -> logits (B, num_outputs, num_classes), read by the
        head's pooling."""
        batch, length, _ = hidden.shape
        if self.pooling == "flatten":  # padded tokens count as zeros, and a short batch is padded out
            if mask is not None:
                hidden = hidden * mask.unsqueeze(-1).to(hidden.dtype)
            picked = F.pad(hidden, (0, 0, 0, self.spec.seq_len - length)).reshape(batch, 1, -1)
        elif self.pooling == "mean":
            weights = (
                torch.ones(batch, length, 1, dtype=hidden.dtype, device=hidden.device)
                if mask is None
                else mask.unsqueeze(-1).to(hidden.dtype)
            )
            picked = (hidden * weights).sum(1, keepdim=True) / weights.sum(1, keepdim=True).clamp_min(1)
        elif mask is None:
            picked = hidden[:, length - self.spec.last_k :]
        else:  # right padding: the last k real tokens end at each sequence's own length
            ends = mask.sum(1, keepdim=True)
            index = (ends - self.spec.last_k + torch.arange(self.spec.last_k, device=hidden.device)).clamp_min(0)
            picked = hidden.gather(1, index.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
        logits = self.linear(picked)
        return logits.reshape(batch, self.spec.num_outputs, self.spec.num_classes)


def check_pooling(pooling: str | None) -> str | None:
    """The one lookup of --pooling (None: the task's default, `default_pooling`)."""
    if pooling is not None and pooling not in POOLINGS:
        raise FptError(f"unknown --pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
    return pooling


@runtime_checkable
class TrainableModel(Protocol):
    """What the trainer, checkpoints and reports need of a model; the frozen transformer and the
    fully trained baselines (fpt.models.baselines) both provide it."""

    weights_name: str  # the backbone (or baseline) a checkpoint is bound to
    weights_hash: str  # identity of the frozen (or initial) weights
    group_rows: list[GroupRow]  # parameter counts per group, trained or frozen, for `fpt info`
    extended_positions: tuple[int, int] | None  # (rows published, rows used) if positions grew

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The tensors training changes, by parameter name: what a checkpoint saves and loads."""

    def __call__(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor: ...
