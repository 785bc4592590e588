"""Time-series classification beyond the paper: the UCR / UEA archives, as patch tokens.

Data comes as .ts files (fpt.data.ts): either a classification set bundled inside sktime
(offline: `fpt.data.ts.ucr_datasets()` lists them) or `--data-dir DIR` holding NAME/NAME_TRAIN.ts
and NAME_TEST.ts, for any of the 128 UCR (univariate) or 30 UEA (multivariate) sets.

Each series is z-normalised per channel over its own length, as is UCR practice (the archive
is about shape, not offset or scale); missing values ("?") become 0 after that. Consecutive
time steps are cut into tokens of `patch_size` steps x channels values; series of unequal
length are right-padded with zeros and masked. Labels map to 0..K-1 in sorted order (numeric
order where every label is a number), kept in `task.notes["classes"]`. Training uses the
official TRAIN split, evaluation the official TEST split ("test"); with --val-size N, N training
series (a fixed random choice) become a "val" split watched while training instead, and the
test split is scored once, when the run ends.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np

from fpt.core.errors import FptError
from fpt.data.ts import read_ts, ucr_split_files
from fpt.tasks.arrays import Split, carve_validation
from fpt.tasks.base import check_patch_size
from fpt.tasks.registry import register_task
from fpt.tasks.sequences import SequenceTask

# Default patch: the fewest steps per token that keep a series within 64 tokens. 64 is the
# paper's CIFAR-10 length (4x4 patches of 32x32); it fits every backbone's position table
# (BERT 512, GPT-2 1024) and keeps a CPU step cheap, while series of <= 64 steps keep one
# step per token (GunPoint, 150 steps: patches of 3 -> 50 tokens; ACSF1, 1460: 23 -> 64).
MAX_DEFAULT_TOKENS = 64


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
        x[i, : len(case)] = case
        mask[i, : math.ceil(len(case) / patch_size)] = True
    # time-major within a token: (t p) d -> t (p d), each token p consecutive steps of all channels
    return x.reshape(len(series), tokens, patch_size * channels), mask


@register_task("ucr")
def ucr(
    dataset: str = "GunPoint",
    data_dir: str | None = None,
    patch_size: int | None = None,
    znorm: bool = True,
    val_size: int = 0,
) -> SequenceTask:
    """A UCR/UEA time-series classification set: sktime's bundled copy, or NAME/NAME_{TRAIN,TEST}.ts in --data-dir.

    patch_size: time steps per token (default: the fewest that keep the longest series within
    64 tokens). znorm: z-normalise each series per channel (UCR practice). val_size: training
    series held out as the split watched while training (0: the test split is watched).
    """
    train_path, test_path = ucr_split_files(dataset, data_dir)
    raw = {"train": read_ts(train_path), "test": read_ts(test_path)}
    d, lengths, patch_size = _check_shapes(raw, train_path.parent, patch_size)
    steps = max(lengths)
    classes = _classes(raw, train_path.parent)
    index = {label: i for i, label in enumerate(classes)}
    missing = sum(int(np.isnan(case).sum()) for series, _ in raw.values() for case in series)
    equal = min(lengths) == steps
    splits = {}
    for split, (series, labels) in raw.items():
        series = [z_normalise(case) if znorm else np.nan_to_num(case, nan=0.0) for case in series]
        x, mask = to_tokens(series, patch_size, steps)
        y = np.array([index[label] for label in labels], dtype=np.int64)
        splits[split] = Split.from_numpy(x, y, None if equal else mask)
    train, evals, watched = carve_validation(splits["train"], splits["test"], val_size)
    notes = {
        "dataset": train_path.stem.removesuffix("_TRAIN"),
        "source": str(train_path.parent),
        "classes": classes,
        "channels": d,
        "series_length": steps,
        "min_length": min(lengths),
        "patch_size": patch_size,
        "tokens": math.ceil(steps / patch_size),
        "znorm": znorm,
        "missing_values": missing,
        "train_size": len(train),
        "test_size": len(splits["test"]),
        "val_size": val_size,
        "evaluated_on": (
            f"{val_size} of the {len(splits['train'])} training series held out as validation (--val-size)"
            if val_size
            else "the test split evaluated while training, never chosen on (--val-size N holds N training series "
            "out as validation, which --keep-best and --patience then choose on)"
        ),
    }
    return SequenceTask(
        "ucr",
        train,
        evals,
        watched,
        num_classes=len(classes),
        seq_len=notes["tokens"],
        input_dim=patch_size * d,
        notes=notes,
    )


def _check_shapes(raw: dict, where: Path, patch_size: int | None) -> tuple[int, list[int], int]:
    """(channels, every series' length, time steps per token), refusing mixed channel counts and a
    patch size beyond the longest series (a longer patch is all padding, and a huge one a huge array)."""
    channels = {case.shape[1] for series, _ in raw.values() for case in series}
    if len(channels) != 1:
        raise FptError(
            f"{where}: series have {sorted(channels)} channels; every series of a dataset needs the same number"
        )
    lengths = [len(case) for series, _ in raw.values() for case in series]
    steps = max(lengths)
    if patch_size is None:
        patch_size = max(1, math.ceil(steps / MAX_DEFAULT_TOKENS))
    check_patch_size(patch_size, steps, "the time steps of the longest series")
    return channels.pop(), lengths, patch_size


def _classes(raw: dict, where: Path) -> list:
    classes = class_order(np.concatenate([labels for _, labels in raw.values()]))
    if len(classes) < 2:
        raise FptError(f"{where}: every label is {classes[0]}; a classifier needs examples of at least two classes")
    return classes
