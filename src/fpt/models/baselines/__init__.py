"""Fully trained baselines of the paper: LSTM, LSTM* and the tutorial CNN; and for a forecast,
DLinear (`linear`, fpt.models.baselines.forecast).

`build_baseline` wraps one as a `TrainableModel`, so the trainer, checkpoints and reports treat
it like a frozen transformer: every parameter is trained (group "trained", or "frozen" for the
"-frozen" variants' LSTM layers), and its identity for checkpoints is a hash of its seeded
initial weights.
"""

from __future__ import annotations

import torch
from torch import nn

from fpt.backbones import weights_hash
from fpt.core.choices import MODELS
from fpt.core.errors import FptError
from fpt.models.policy import GroupRow

FORECAST_MODELS = ("linear",)  # baselines of a series regression task (a forecast) alone


def check_model(model: str) -> str:
    """The one lookup of --model."""
    if model not in MODELS:
        raise FptError(f"unknown --model {model!r}; choose one of {', '.join(MODELS)}")
    return model


class Baseline(nn.Module):
    """A fully trained model (a TrainableModel, as the frozen transformer)."""

    def __init__(self, name: str, body: nn.Module, frozen: nn.Module | None = None):
        super().__init__()
        self.body = body
        self.weights_name, self.weights_hash = name, weights_hash(body)
        self.extended_positions = None
        frozen_count = 0
        if frozen is not None:
            frozen.requires_grad_(False)
            frozen_count = sum(p.numel() for p in frozen.parameters())
        trained = sum(p.numel() for p in body.parameters()) - frozen_count
        self.group_rows = [GroupRow("trained", trained, True)] + (
            [GroupRow("frozen", frozen_count, False)] if frozen else []
        )

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The parameters training changes (all but a "-frozen" variant's LSTM layers), detached: what a checkpoint
        saves."""
        return {n: p.detach() for n, p in self.named_parameters() if p.requires_grad}

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The wrapped model's outputs: (B, num_outputs, num_classes) logits, or (B, horizon, 1) forecasts."""
        return self.body(x, mask)


def build_baseline(kind: str, task, dropout: float = 0.1, match_params: int | None = None) -> Baseline:
    """`lstm` (3 x 768), `lstm*` (12 residual layers + positions), either with "-frozen" (LSTM
    layers left at random init), `cnn` (the tutorial CNN) or `cnn-matched` (the same CNN
    scaled to `match_params` parameters, e.g. the FPT's trained count), or, for a forecast,
    `linear` (DLinear on the look-back)."""
    from fpt.models.baselines.cnn import TutorialCNN, width_for_params
    from fpt.models.baselines.forecast import DLinear
    from fpt.models.baselines.lstm import lstm, lstm_star

    check_model(kind)
    spec = task.spec
    series = spec.regression and spec.patch_stride is not None
    if kind in FORECAST_MODELS and not series:
        raise FptError(
            f"--model {kind} forecasts a series; it needs a forecasting task (ett:ETTh1, forecast:FILE.csv), "
            f"not {task.name!r}"
        )
    if kind not in FORECAST_MODELS and spec.regression:
        raise FptError(
            f"--model {kind} is a classification baseline; for the forecast {task.name!r} use --model "
            f"{' or '.join(FORECAST_MODELS)} (DLinear) or fpt"
        )
    if kind == "linear":
        return Baseline(kind, DLinear(task.train.lookback, spec.num_outputs))
    if kind in ("lstm", "lstm-frozen"):
        body = lstm(spec, dropout=dropout)
        return Baseline(kind, body, frozen=body.blocks if kind.endswith("-frozen") else None)
    if kind in ("lstm*", "lstm*-frozen"):
        body = lstm_star(spec, dropout=dropout)
        return Baseline(kind, body, frozen=body.blocks if kind.endswith("-frozen") else None)
    if kind in ("cnn", "cnn-matched"):
        geometry = getattr(task, "image_geometry", None)
        if geometry is None:
            raise FptError(f"--model {kind} needs an image task (mnist, fashion-mnist, cifar10), not {task.name!r}")
        scale = width_for_params(match_params, **geometry) if kind == "cnn-matched" else 1.0
        return Baseline(kind, TutorialCNN(**geometry, num_classes=spec.num_classes, width_scale=scale))
    raise FptError(f"--model {kind} is not a baseline; build it with fpt.training.build.build")
