"""Time-series classification beyond the paper: the UCR / UEA archives, as patch tokens.

Data comes as .ts files (the format of timeseriesclassification.com, sktime and aeon) read
with sktime's loader: either a classification set bundled inside sktime (offline:
`ucr_datasets()` lists them) or `--data-dir DIR` holding NAME/NAME_TRAIN.ts and
NAME_TEST.ts, for any of the 128 UCR (univariate) or 30 UEA (multivariate) sets.

Each series is z-normalised per channel over its own length, as is UCR practice (the archive
is about shape, not offset or scale); missing values ("?") become 0 after that. Consecutive
time steps are cut into tokens of `patch_size` steps x channels values; series of unequal
length are right-padded with zeros and masked. Labels map to 0..K-1 in sorted order (numeric
order where every label is a number), kept in `task.notes["classes"]`. Training uses the
official TRAIN split, evaluation the official TEST split ("test").
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np

from fpt.errors import FptError
from fpt.tasks import register_task
from fpt.tasks.arrays import Split
from fpt.tasks.sequences import SequenceTask

# Default patch: the fewest steps per token that keep a series within 64 tokens. 64 is the
# paper's CIFAR-10 length (4x4 patches of 32x32); it fits every backbone's position table
# (BERT 512, GPT-2 1024) and keeps a CPU step cheap, while series of <= 64 steps keep one
# step per token (GunPoint, 150 steps: patches of 3 -> 50 tokens; ACSF1, 1460: 23 -> 64).
MAX_DEFAULT_TOKENS = 64
ARCHIVE_URL = "https://www.timeseriesclassification.com/"
INSTALL = "pip install sktime"


def _sktime_datasets():
    try:
        import sktime.datasets
    except ImportError:
        raise FptError(f"the ucr task reads .ts files with sktime, which is not installed: run `{INSTALL}`") from None
    return sktime.datasets


def bundled_dir() -> Path:
    """The folder of .ts files inside the installed sktime."""
    return Path(_sktime_datasets().__file__).parent / "data"


def ts_header(path: Path) -> dict[str, str]:
    """A .ts file's @-lines before @data, keys lower-cased: {"classlabel": "true 1 2", ...}."""
    header = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if line.lower().startswith("@data"):
                    break
                if line.startswith("@"):
                    key, _, value = line[1:].partition(" ")
                    header[key.lower()] = value.strip()
    except OSError as e:
        raise FptError(f"{path}: cannot read ({e.strerror or e})") from None
    return header


def _is_classification(path: Path) -> bool:
    return ts_header(path).get("classlabel", "").lower().startswith("true")


def ucr_datasets() -> list[str]:
    """Classification sets bundled inside sktime (each with NAME_TRAIN.ts and NAME_TEST.ts)."""
    root = bundled_dir()
    return sorted(d.name for d in root.iterdir()
                  if (d / f"{d.name}_TRAIN.ts").is_file() and (d / f"{d.name}_TEST.ts").is_file()
                  and _is_classification(d / f"{d.name}_TRAIN.ts"))


def _split_files(dataset: str, data_dir: str | None) -> tuple[Path, Path]:
    if data_dir is not None:
        folder = Path(data_dir).expanduser()
        for where in (folder / dataset, folder):  # DIR/NAME/NAME_TRAIN.ts, or DIR is NAME's own folder
            train, test = where / f"{dataset}_TRAIN.ts", where / f"{dataset}_TEST.ts"
            if train.is_file() and test.is_file():
                return train, test
        raise FptError(f"no {dataset}_TRAIN.ts and {dataset}_TEST.ts in {folder / dataset} or {folder}: "
                       f"pass --data-dir holding {dataset}/{dataset}_TRAIN.ts and _TEST.ts (from {ARCHIVE_URL})")
    bundled = ucr_datasets()
    name = next((b for b in bundled if b.lower() == dataset.lower()), None)
    if name is None:
        raise FptError(f"{dataset!r} is not bundled with sktime (bundled: {', '.join(bundled)}); for another "
                       f"UCR/UEA set pass --data-dir DIR holding {dataset}/{dataset}_TRAIN.ts and _TEST.ts "
                       f"(from {ARCHIVE_URL})")
    root = bundled_dir() / name
    return root / f"{name}_TRAIN.ts", root / f"{name}_TEST.ts"


def read_ts(path: Path) -> tuple[list[np.ndarray], np.ndarray]:
    """A classification .ts file -> series as float32 (length, channels) arrays, and str labels."""
    header = ts_header(path)
    if not header.get("classlabel", "").lower().startswith("true"):
        kind = "a regression set (@targetLabel)" if "targetlabel" in header else "unlabelled (no @classLabel true)"
        raise FptError(f"{path}: {kind}; the ucr task classifies: choose a dataset whose .ts files say @classLabel true")
    load_from_tsfile = _sktime_datasets().load_from_tsfile
    try:
        frame, labels = load_from_tsfile(str(path), return_data_type="nested_univ", return_y=True)
    except Exception as e:  # sktime raises IOError, ValueError or its own parse errors
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise FptError(f"{path}: not a readable .ts file ({reason}); see the format at {ARCHIVE_URL}") from None
    series = []
    for row in frame.to_numpy():
        channels = [np.asarray(cell, dtype=np.float32) for cell in row]
        length = max(len(c) for c in channels)  # a channel shorter than its siblings is padded as missing
        case = np.full((length, len(channels)), np.nan, dtype=np.float32)
        for j, channel in enumerate(channels):
            case[:len(channel), j] = channel
        series.append(case)
    if not series:
        raise FptError(f"{path}: no series in the file")
    return series, np.asarray(labels).astype(str)


def class_order(labels: np.ndarray) -> list[str]:
    """Distinct labels, sorted numerically when all are numbers (so "10" follows "9"), else as text."""
    distinct = sorted(set(labels.tolist()))
    try:
        return sorted(distinct, key=float)
    except ValueError:
        return distinct


def z_normalise(case: np.ndarray) -> np.ndarray:
    """Each channel to mean 0, std 1 over its observed steps (a constant channel to 0); missing -> 0."""
    with warnings.catch_warnings():  # an all-missing channel: nanmean warns, the result is fixed below
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(case, axis=0, keepdims=True)
        std = np.nanstd(case, axis=0, keepdims=True)
    std = np.where(np.isfinite(std) & (std > 1e-8), std, 1.0)
    return np.nan_to_num((case - np.nan_to_num(mean)) / std, nan=0.0).astype(np.float32)


def to_tokens(series: list[np.ndarray], patch_size: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Series (length_i, D) -> tokens (N, ceil(steps / p), p * D) zero-padded, and a token mask."""
    channels = series[0].shape[1]
    tokens = math.ceil(steps / patch_size)
    x = np.zeros((len(series), tokens * patch_size, channels), dtype=np.float32)
    mask = np.zeros((len(series), tokens), dtype=bool)
    for i, case in enumerate(series):
        x[i, :len(case)] = case
        mask[i, :math.ceil(len(case) / patch_size)] = True
    # time-major within a token: (t p) d -> t (p d), each token p consecutive steps of all channels
    return x.reshape(len(series), tokens, patch_size * channels), mask


@register_task("ucr")
def ucr(dataset: str = "GunPoint", data_dir: str | None = None, patch_size: int | None = None,
        znorm: bool = True) -> SequenceTask:
    """A UCR/UEA time-series classification set: sktime's bundled copy, or NAME/NAME_{TRAIN,TEST}.ts in --data-dir.

    patch_size: time steps per token (default: the fewest that keep the longest series within
    64 tokens). znorm: z-normalise each series per channel (UCR practice).
    """
    train_path, test_path = _split_files(dataset, data_dir)
    raw = {"train": read_ts(train_path), "test": read_ts(test_path)}
    channels = {case.shape[1] for series, _ in raw.values() for case in series}
    if len(channels) != 1:
        raise FptError(f"{train_path.parent}: series have {sorted(channels)} channels; every series of a "
                       "dataset needs the same number")
    lengths = [len(case) for series, _ in raw.values() for case in series]
    steps = max(lengths)
    if patch_size is None:
        patch_size = max(1, math.ceil(steps / MAX_DEFAULT_TOKENS))
    if patch_size < 1:
        raise FptError(f"--patch-size must be at least 1 time step, got {patch_size}")
    classes = class_order(np.concatenate([labels for _, labels in raw.values()]))
    index = {label: i for i, label in enumerate(classes)}
    missing = sum(int(np.isnan(case).sum()) for series, _ in raw.values() for case in series)
    equal = min(lengths) == steps
    splits = {}
    for split, (series, labels) in raw.items():
        series = [z_normalise(case) if znorm else np.nan_to_num(case, nan=0.0) for case in series]
        x, mask = to_tokens(series, patch_size, steps)
        y = np.array([index[label] for label in labels], dtype=np.int64)
        splits[split] = Split.from_numpy(x, y, None if equal else mask)
    (d,) = channels
    notes = {"dataset": train_path.stem.removesuffix("_TRAIN"), "source": str(train_path.parent),
             "classes": classes, "channels": d, "series_length": steps, "min_length": min(lengths),
             "patch_size": patch_size, "tokens": math.ceil(steps / patch_size), "znorm": znorm,
             "missing_values": missing, "train_size": len(splits["train"]), "test_size": len(splits["test"])}
    return SequenceTask("ucr", splits["train"], {"test": splits["test"]}, "test", num_classes=len(classes),
                        seq_len=notes["tokens"], input_dim=patch_size * d, notes=notes)
