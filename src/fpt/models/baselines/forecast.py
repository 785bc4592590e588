"""Forecasting baselines: the floor a reader checks first beside a frozen transformer.

- `DLinear` (`--model linear`; Zeng et al., AAAI 2023, "Are Transformers Effective for Time
  Series Forecasting?"): the look-back split by a moving average (kernel 25, the window
  edge-padded with copies of its first and last value) into a trend and a remainder ("seasonal"),
  each mapped by a Linear(lookback -> horizon), the two summed. Channel-independent with one
  set of weights for every channel (the paper's "individual=False"), no normalisation of its
  own, default nn.Linear initialisation; trained by fpt's loop like any baseline.
- `NaiveForecast` (the last-value forecast): every future step is the window's last value. It
  has no parameters and is not trained: score it with
  `fpt.evaluate(NaiveForecast(horizon), task, split="test")`.

Both take a series task's raw windows x (B, lookback) and return (B, horizon, 1), the regression
outputs every fpt model gives.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

DLINEAR_KERNEL = 25  # DLinear's moving_avg for every dataset


def moving_average(x: torch.Tensor, kernel: int = DLINEAR_KERNEL) -> torch.Tensor:
    """The trend of windows x (B, T): the mean of `kernel` steps centred on each step, the window
    extended by (kernel - 1) / 2 copies of its first value before it and of its last after it
    (DLinear's moving_avg), so the trend has the window's length."""
    _check_kernel(kernel)
    half = (kernel - 1) // 2
    padded = F.pad(x.unsqueeze(1), (half, half), mode="replicate") if half else x.unsqueeze(1)
    return F.avg_pool1d(padded, kernel, stride=1).squeeze(1)


def _check_kernel(kernel: int) -> None:
    if kernel < 1 or kernel % 2 == 0:
        raise ValueError(f"the moving average's kernel must be a positive odd number, got {kernel}")


class DLinear(nn.Module):
    """Trend and remainder of the look-back, each through its own Linear(lookback -> horizon), summed."""

    def __init__(self, lookback: int, horizon: int, kernel: int = DLINEAR_KERNEL):
        super().__init__()
        _check_kernel(kernel)
        self.lookback, self.horizon, self.kernel = lookback, horizon, kernel
        self.seasonal = nn.Linear(lookback, horizon)
        self.trend = nn.Linear(lookback, horizon)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Windows (B, lookback) -> forecasts (B, horizon, 1): a linear map of the window's moving-average trend plus
        one of the rest."""
        trend = moving_average(x, self.kernel)
        return (self.seasonal(x - trend) + self.trend(trend)).unsqueeze(-1)


class NaiveForecast(nn.Module):
    """The last-value forecast: (B, lookback) -> (B, horizon, 1), every step the window's last value."""

    def __init__(self, horizon: int):
        super().__init__()
        self.horizon = horizon

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Windows (B, lookback) -> (B, horizon, 1), every step the window's last value."""
        return x[:, -1:].expand(-1, self.horizon).unsqueeze(-1)
