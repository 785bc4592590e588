"""LSTM baselines (appendix D): every parameter trained.

`lstm`: 3 layers, hidden 768. `lstm*`: 12 single-layer LSTMs with residual connections and
learned positional embeddings. Both read the task through the same input embedder and output
head as the frozen transformer, so only the body differs.
"""

from __future__ import annotations

import torch
from torch import nn

from fpt.models.ends import InputEmbedder, OutputHead
from fpt.tasks.spec import TaskSpec


class LSTMClassifier(nn.Module):
    """An LSTM body between the frozen transformer's input embedder and output head: one multi-layer LSTM (`lstm`), or
    one-layer LSTMs adding to a residual stream with learned positions (`lstm*`)."""

    def __init__(
        self,
        spec: TaskSpec,
        hidden_size: int = 768,
        layers: int = 3,
        residual: bool = False,
        positions: bool = False,
        dropout: float = 0.1,
    ):
        super().__init__()
        self.spec, self.residual = spec, residual
        self.embedder = InputEmbedder(spec, hidden_size, dropout, extra_positions=positions)
        if residual:  # LSTM*: a stack of one-layer LSTMs, each adding to the residual stream
            self.blocks = nn.ModuleList(nn.LSTM(hidden_size, hidden_size, batch_first=True) for _ in range(layers))
        else:
            self.blocks = nn.ModuleList(
                [
                    nn.LSTM(
                        hidden_size,
                        hidden_size,
                        num_layers=layers,
                        batch_first=True,
                        dropout=dropout if layers > 1 else 0.0,
                    )
                ]
            )
        self.head = OutputHead(spec, hidden_size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Inputs as the task gives them -> logits (B, num_outputs, num_classes), the head reading each row's last real
        tokens."""
        # Right padding: the head reads the last real tokens, whose states never saw the padding.
        hidden = self.embedder(x)
        for block in self.blocks:
            out, _ = block(hidden)
            hidden = hidden + out if self.residual else out
        return self.head(hidden, mask)


def lstm(spec: TaskSpec, hidden_size: int = 768, layers: int = 3, dropout: float = 0.1) -> LSTMClassifier:
    """The paper's LSTM baseline: 3 layers of 768, dropout between them."""
    return LSTMClassifier(spec, hidden_size, layers, dropout=dropout)


def lstm_star(spec: TaskSpec, hidden_size: int = 768, layers: int = 12, dropout: float = 0.1) -> LSTMClassifier:
    """The paper's LSTM*: 12 residual one-layer LSTMs of 768 with learned positions."""
    return LSTMClassifier(spec, hidden_size, layers, residual=True, positions=True, dropout=dropout)
