"""Long-term forecasting of multivariate series, on the protocol the field's tables use (Informer,
Autoformer, DLinear, PatchTST, One Fits All): `--task ett:ETTh1` (or ETTh2) and
`--task forecast:FILE.csv` for any CSV with a date column and numeric columns.

- Splits by time. ETTh: the first 12 months train, the next 4 validate, the next 4 test (8,640 /
  2,880 / 2,880 hours; the rest of the file is unused, as in every published table). Any other
  CSV: the first 70% of rows train, the last 20% test, the 10% between validate.
- A window is `lookback` steps of input and the `horizon` steps after them as the target. Its
  look-back may reach back across its split's start (the first validation window reads the last
  training hours), its horizon never crosses the split's end. Every window of a split is scored:
  no last batch is dropped (a known bug of several published loaders).
- A StandardScaler is fitted on the training rows only; inputs, targets and metrics (MSE, MAE)
  are on the scaled values, as the published tables' are.
- Channel independence: each channel of each window is one example through the shared model
  (7 examples per ETTh window). Examples are ordered window by window, channels within.
- The model patches each window (16 steps, stride 8, configurable) and normalises it per window
  (fpt.models.ends.WindowScale); the head reads every token (fpt.models.ends.default_pooling).

Training batches follow one seeded permutation of the (window, channel) examples per epoch, so a
batch depends on (seed, step) alone and a resumed run sees the batches it would have seen.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fpt.core.errors import MISSING_DATA, FptError
from fpt.core.paths import data_dir as default_data_dir
from fpt.core.paths import user_path
from fpt.data.series_csv import SeriesTable, read_series_csv
from fpt.tasks.arrays import ArrayTask
from fpt.tasks.base import Batch, TaskSpec, check_patch_size, series_tokens, training_share
from fpt.tasks.registry import check_task_option_values, register_task

ETT_DATASETS = ("ETTh1", "ETTh2")
ETT_HOURS = {"train": 12 * 30 * 24, "val": 4 * 30 * 24, "test": 4 * 30 * 24}  # 30-day months
CUSTOM_SHARES = {"train": 0.7, "test": 0.2}  # the rest, between them, validates
SPLITS = ("train", "val", "test")


@dataclass
class Windows:
    """Every (window, channel) example of one split: a view of the scaled series, nothing copied.

    `series` (C, T) holds the rows the split's windows read (its look-back reach included);
    example i is channel i % C of the window starting at row i // C.
    """

    series: torch.Tensor
    lookback: int
    horizon: int
    lengths = None  # fixed length: no padding, no mask

    @property
    def channels(self) -> int:
        """Channels (C) of the series: each window gives one example per channel."""
        return self.series.shape[0]

    @property
    def windows(self) -> int:
        """Windows of lookback + horizon rows that fit in the split's rows."""
        return self.series.shape[1] - self.lookback - self.horizon + 1

    def __len__(self) -> int:
        return self.windows * self.channels

    def examples(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (B, lookback) and targets (B, horizon) of examples `index`."""
        start, channel = index // self.channels, index % self.channels
        steps = start[:, None] + torch.arange(self.lookback + self.horizon)
        rows = self.series[channel[:, None], steps]
        return rows[:, : self.lookback], rows[:, self.lookback :]


class ForecastTask(ArrayTask):
    """Windows of a scaled multivariate series: predict the next `horizon` values of a channel."""

    date_column: str | None = None  # --date-column, for `fpt predict` to read a CSV of the run's own format

    def __init__(self, name: str, splits: dict[str, Windows], patch_size: int, patch_stride: int, notes: dict):
        self.name, self.notes = name, notes
        super().__init__(splits["train"], {"val": splits["val"], "test": splits["test"]}, "val")
        lookback, horizon = splits["train"].lookback, splits["train"].horizon
        self.spec = TaskSpec(
            seq_len=series_tokens(lookback, patch_size, patch_stride),
            num_classes=1,
            input_dim=patch_size,
            outputs_per_token=horizon,
            target="values",
            patch_stride=patch_stride,
            window_norm=True,
        )

    @property
    def pinned_options(self) -> dict:
        """Options a run records so that rebuilding its task later reads the same file (see check_unchanged)."""
        return {"sha256": self.notes["sha256"]}

    def subset_index(self, split: str | None, limit: int) -> tuple[torch.Tensor, str] | None:
        """--eval-subset for a forecast: every k-th window of the split, each with all its channels,
        k the smallest stride that keeps at most `limit` examples (at least one window), and the
        subset's name ("[::k windows]"); None where the whole split fits. The first N examples
        would be the split's first days (examples are in time order): a biased monitor."""
        data = self.eval_split_data(split)
        if len(data) <= limit:
            return None
        stride = -(-data.windows // max(1, limit // data.channels))
        windows = torch.arange(0, data.windows, stride)
        index = (windows[:, None] * data.channels + torch.arange(data.channels)).reshape(-1)
        return index, f"[::{stride} windows]"

    def make_batch(self, split: Windows, index: torch.Tensor, gen: torch.Generator | None) -> Batch:
        """Examples `index` of `split` as a Batch: look-back windows in x, the next `horizon` values in y (no mask;
        `gen` unused: no augmentation)."""
        x, y = split.examples(index)
        return Batch(x, y)

    def keep_training_share(self, fraction: float) -> None:
        """The earliest `training_share` of the training windows, each with all its channels (One
        Fits All's --percent); the scaler stays the one fitted on every training row, so validation
        and test are scored exactly as without the cut."""
        train = self.train
        kept = training_share(fraction, train.windows, "windows")
        self.train = Windows(
            train.series[:, : kept + train.lookback + train.horizon - 1], train.lookback, train.horizon
        )
        self._epoch = None
        self.notes = {
            **self.notes,
            "train_fraction": {
                "fraction": fraction,
                "kept": kept,
                "of": train.windows,
                "unit": "windows",
                "examples": len(self.train),
            },
        }


def check_window_options(lookback: int, horizon: int, patch_size: int, patch_stride: int) -> None:
    """Refuse, in one line, a look-back, horizon, patch size or stride that is not a whole number of at least 1
    (None too: the task's choices are made by now, fpt.tasks.registry.check_task_option_values's rule), or a
    patch longer than the look-back."""
    options = {"lookback": lookback, "horizon": horizon, "patch_size": patch_size, "patch_stride": patch_stride}
    check_task_option_values(options, chosen=True)
    check_patch_size(patch_size, lookback, f"the look-back, --lookback {lookback}")
    if patch_stride > patch_size:  # the steps between two patches would never reach the model
        raise FptError(
            f"--patch-stride {patch_stride} is longer than --patch-size {patch_size}: steps {patch_size + 1} to "
            f"{patch_stride} of every window would never be read; use a stride of at most {patch_size}"
        )


def split_rows(rows: int, lookback: int, ett: bool) -> dict[str, tuple[int, int]]:
    """[first, end) rows each split's windows read: its own rows, the look-back before them included."""
    if ett:
        train, val, test = ETT_HOURS["train"], ETT_HOURS["val"], ETT_HOURS["test"]
    else:
        train, test = int(rows * CUSTOM_SHARES["train"]), int(rows * CUSTOM_SHARES["test"])
        val = rows - train - test
    ends = {"train": train, "val": train + val, "test": train + val + test}
    return {
        "train": (0, train),
        "val": (max(0, train - lookback), ends["val"]),
        "test": (max(0, ends["val"] - lookback), ends["test"]),
    }


def file_digest(path: Path) -> str:
    """The sha256 of the file's bytes, hex: what a run pins so that a changed file is noticed (`check_unchanged`)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check_unchanged(path: Path, sha256: str | None) -> str:
    """The file's sha256, refused where a run recorded another: its splits and scaler are made from
    the rows, so a file grown or edited since training would move them (a resumed run could train
    on former test rows, an evaluation score other windows)."""
    digest = file_digest(path)
    if sha256 is not None and digest != sha256:
        raise FptError(
            f"{path} changed since this run was trained (sha256 {digest[:12]}..., the run's "
            f"{sha256[:12]}...); its splits and scaler come from the file's rows: put the original "
            "file back, or train a new run on the new one"
        )
    return digest


DAY = 86_400  # seconds


def seasonal_period(dates: np.ndarray) -> int:
    """The season of a series in steps, from its most common step: a day of sub-daily steps (24 hourly,
    ETTh's; 96 at 15 minutes, ETTm's), a week of days (7), a year of weeks (52), of months (12) or of
    quarters (4); 1 for any other step. What the seasonal baselines repeat (fpt.reference.windows)."""
    gaps, counts = np.unique(np.diff(dates).astype("timedelta64[s]").astype(np.int64), return_counts=True)
    if not len(gaps):
        return 1
    step = int(gaps[counts.argmax()])
    if 0 < step < DAY and DAY % step == 0:
        return DAY // step
    for low, high, period in ((DAY, DAY, 7), (7 * DAY, 7 * DAY, 52), (28 * DAY, 31 * DAY, 12), (89 * DAY, 92 * DAY, 4)):
        if low <= step <= high:
            return period
    return 1


def build_forecast(
    name: str,
    table: SeriesTable,
    lookback: int,
    horizon: int,
    patch_size: int,
    patch_stride: int,
    ett: bool,
    sha256: str,
) -> ForecastTask:
    """Splits, scaler and windows of a series table (see the module docstring)."""
    check_window_options(lookback, horizon, patch_size, patch_stride)
    rows = len(table.values)
    if ett and rows < sum(ETT_HOURS.values()):
        raise FptError(
            f"{table.path} has {rows} rows; the ETTh protocol needs {sum(ETT_HOURS.values())} hours "
            "(20 months): fetch the file again with `fpt data get ett`"
        )
    bounds = split_rows(rows, lookback, ett)
    short = [s for s, (first, end) in bounds.items() if end - first < lookback + horizon]
    if short:
        first, end = bounds[short[0]]
        own = end - max(first, bounds["train"][1] if short[0] != "train" else 0)  # its rows, without the look-back
        fits = (
            f"a look-back of at most {end - first - horizon} fits this horizon"
            if short[0] == "train" and end - first > horizon
            else f"its {own} rows hold a horizon of at most {own}"
        )
        raise FptError(
            f"{table.path}: the {short[0]} split has {end - first} rows with its look-back, fewer than "
            f"--lookback + --horizon ({lookback} + {horizon}): {fits}; or give a longer series"
        )
    train_first, train_end = bounds["train"]
    mean = table.values[train_first:train_end].mean(axis=0)
    std = table.values[train_first:train_end].std(axis=0)  # StandardScaler's: population std
    std = np.where(std > 0, std, 1.0)  # a constant training column scales by 1, as scikit-learn's does
    scaled = torch.from_numpy(((table.values - mean) / std).T.astype(np.float32)).contiguous()
    splits = {s: Windows(scaled[:, first:end], lookback, horizon) for s, (first, end) in bounds.items()}
    notes = {
        "source": str(table.path),
        "sha256": sha256,
        "columns": table.columns,
        "channels": len(table.columns),
        "lookback": lookback,
        "horizon": horizon,
        "patch_size": patch_size,
        "patch_stride": patch_stride,
        "split_rows": {s: list(b) for s, b in bounds.items()},
        "windows": {s: w.windows for s, w in splits.items()},
        "examples": {s: len(w) for s, w in splits.items()},
        "first_target_date": {s: str(table.dates[first + lookback]) for s, (first, _) in bounds.items()},
        "scaler_mean": mean.tolist(),
        "scaler_std": std.tolist(),
        "period": seasonal_period(table.dates),
        "protocol": ("ETTh: 12/4/4 months" if ett else "70/10/20% of rows") + ", scaler fitted on train, "
        "metrics on scaled values, channel-independent, every window scored",
    }
    return ForecastTask(name, splits, patch_size, patch_stride, notes)


@register_task("ett")
def ett(
    dataset: str = "ETTh1",
    data_dir: str | None = None,
    lookback: int = 336,
    horizon: int = 96,
    patch_size: int = 16,
    patch_stride: int = 8,
    sha256: str | None = None,
) -> ForecastTask:
    """ETTh1 or ETTh2 (`--task ett:ETTh1`): 7 channels of hourly transformer load and oil temperature,
    forecast `horizon` hours (96, 192, 336, 720 in the published tables) from `lookback` hours
    (336, One Fits All's for ETTh). The CSV comes from `fpt data get ett` or --data-dir."""
    if dataset not in ETT_DATASETS:
        raise FptError(f"unknown ETT dataset {dataset!r}; choose {' or '.join(ETT_DATASETS)} (--task ett:ETTh1)")
    folder = user_path(data_dir) if data_dir else default_data_dir("ett")
    path = folder / f"{dataset}.csv"
    if not path.is_file():
        raise FptError(
            f"no {dataset}.csv in {folder}: run `fpt data get ett` or pass --data-dir DIR holding it", kind=MISSING_DATA
        )
    digest = check_unchanged(path, sha256)
    table = read_series_csv(path, bad_value_fix="delete the file and fetch it again with `fpt data get ett`")
    return build_forecast(f"ett:{dataset}", table, lookback, horizon, patch_size, patch_stride, ett=True, sha256=digest)


# A CSV's look-back where none is given: One Fits All's 336 where the training rows afford it, else the
# longest of 5, 4, 3, 2 or 1 horizons; "afford": at most half the training rows' room before the horizon,
# so that the training split keeps at least as many windows as a window has steps
DEFAULT_LOOKBACK = 336
DEFAULT_PATCH, DEFAULT_STRIDE = 16, 8  # One Fits All's, where the look-back holds two patches or more


LOOKBACK_MULTIPLES = (5, 4, 3, 2, 1)  # of the horizon, the longest a series affords first


def longest_lookback_multiple(horizon: int, room: float) -> int | None:
    """The largest of LOOKBACK_MULTIPLES whose look-back (that many horizons) fits in `room` steps; None: none fits."""
    return next((m for m in LOOKBACK_MULTIPLES if m * horizon <= room), None)


def choose_csv_windows(
    rows: int, horizon: int, lookback: int | None, patch_size: int | None, patch_stride: int | None
) -> tuple[int | None, int, int, str]:
    """(lookback, patch size, stride, what was chosen from the data) for a CSV of `rows` rows; a look-back
    that no rule fits is left None (build_forecast then says what would fit)."""
    said = []
    if lookback is None:
        room = (int(rows * CUSTOM_SHARES["train"]) - horizon) // 2
        multiple = longest_lookback_multiple(horizon, room)
        lookback = DEFAULT_LOOKBACK if DEFAULT_LOOKBACK <= room else (multiple and multiple * horizon)
        if lookback is not None and lookback != DEFAULT_LOOKBACK:
            said.append(f"look-back {lookback} ({lookback // horizon} x the horizon {horizon}; 336 needs more rows)")
    if patch_size is None:
        patch_size = DEFAULT_PATCH if lookback is None or lookback >= 2 * DEFAULT_PATCH else max(1, lookback // 4)
        said += [] if patch_size == DEFAULT_PATCH else [f"patches of {patch_size}"]
    if patch_stride is None:
        patch_stride = DEFAULT_STRIDE if patch_size == DEFAULT_PATCH else max(1, patch_size // 2)
        said += [] if patch_stride == DEFAULT_STRIDE else [f"stride {patch_stride}"]
    return lookback, patch_size, patch_stride, ", ".join(said)


@register_task("forecast")
def forecast(
    path: str,
    date_column: str | None = None,
    columns: str | None = None,
    lookback: int | None = None,
    horizon: int = 96,
    patch_size: int | None = None,
    patch_stride: int | None = None,
    sha256: str | None = None,
) -> ForecastTask:
    """Any CSV with a date column and numeric columns (`--task forecast:FILE.csv`): every numeric
    column (or those of --columns A,B) is a channel; splits 70/10/20% of rows in time order. Where
    not given, the look-back is 336 if the training rows afford it, else a multiple of the horizon
    they do (`choose_csv_windows`), with patches of 16 steps, stride 8 (fewer for a short look-back)."""
    check_task_option_values({"horizon": horizon}, chosen=True)  # no rule chooses one: None is refused, in one line
    chosen = None if columns is None else [name.strip() for name in columns.split(",") if name.strip()]
    table = read_series_csv(user_path(path), date_column=date_column, columns=chosen)  # a missing file: one line
    digest = check_unchanged(table.path, sha256)
    lookback, patch_size, patch_stride, said = choose_csv_windows(
        len(table.values), horizon, lookback, patch_size, patch_stride
    )
    task = build_forecast(
        f"forecast:{Path(path).name}",
        table,
        DEFAULT_LOOKBACK if lookback is None else lookback,  # none fits: its refusal names what would
        horizon,
        patch_size,
        patch_stride,
        ett=False,
        sha256=digest,
    )
    if said:
        task.notes["chosen_from_data"] = said
    task.date_column = date_column
    return task
