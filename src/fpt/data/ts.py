"""The .ts format of the UCR / UEA time-series archives (timeseriesclassification.com, sktime,
aeon), read with sktime's loader: files of a dataset folder, or a set bundled inside sktime."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fpt.core.errors import FptError
from fpt.core.paths import user_path

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
    return sorted(
        d.name
        for d in root.iterdir()
        if (d / f"{d.name}_TRAIN.ts").is_file()
        and (d / f"{d.name}_TEST.ts").is_file()
        and _is_classification(d / f"{d.name}_TRAIN.ts")
    )


def ucr_split_files(dataset: str, data_dir: str | None) -> tuple[Path, Path]:
    """The (TRAIN, TEST) .ts files of UCR/UEA set `dataset`: under `data_dir` (DIR/NAME/ or DIR itself) if given, else
    sktime's bundled copy (names matched case-insensitively); a set found nowhere is one line saying where to get
    it."""
    if data_dir is not None:
        folder = user_path(data_dir)
        for where in (folder / dataset, folder):  # DIR/NAME/NAME_TRAIN.ts, or DIR is NAME's own folder
            train, test = where / f"{dataset}_TRAIN.ts", where / f"{dataset}_TEST.ts"
            if train.is_file() and test.is_file():
                return train, test
        raise FptError(
            f"no {dataset}_TRAIN.ts and {dataset}_TEST.ts in {folder / dataset} or {folder}: "
            f"pass --data-dir holding {dataset}/{dataset}_TRAIN.ts and _TEST.ts (from {ARCHIVE_URL})"
        )
    bundled = ucr_datasets()
    name = next((b for b in bundled if b.lower() == dataset.lower()), None)
    if name is None:
        raise FptError(
            f"{dataset!r} is not bundled with sktime (bundled: {', '.join(bundled)}); for another "
            f"UCR/UEA set pass --data-dir DIR holding {dataset}/{dataset}_TRAIN.ts and _TEST.ts "
            f"(from {ARCHIVE_URL})"
        )
    root = bundled_dir() / name
    return root / f"{name}_TRAIN.ts", root / f"{name}_TEST.ts"


def read_ts(path: Path) -> tuple[list[np.ndarray], np.ndarray]:
    """A classification .ts file -> series as float32 (length, channels) arrays, and str labels."""
    header = ts_header(path)
    if not header.get("classlabel", "").lower().startswith("true"):
        kind = "a regression set (@targetLabel)" if "targetlabel" in header else "unlabelled (no @classLabel true)"
        raise FptError(
            f"{path}: {kind}; the ucr task classifies: choose a dataset whose .ts files say @classLabel true"
        )
    load_from_tsfile = _sktime_datasets().load_from_tsfile
    try:
        frame, labels = load_from_tsfile(str(path), return_data_type="nested_univ", return_y=True)
    except Exception as e:  # sktime raises IOError, ValueError or its own parse errors
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise FptError(f"{path}: not a readable .ts file ({reason}); see the format at {ARCHIVE_URL}") from None
    series = []
    for row in frame.to_numpy():
        channels = [np.asarray(cell, dtype=np.float64) for cell in row]
        if any(np.isinf(c).any() or (np.abs(c[np.isfinite(c)]) > np.finfo(np.float32).max).any() for c in channels):
            raise FptError(f"{path}: a value is infinite or beyond float32 (|x| > 3.4e38); clean the file first")
        channels = [c.astype(np.float32) for c in channels]  # missing values ("?") stay NaN
        length = max(len(c) for c in channels)  # a channel shorter than its siblings is padded as missing
        case = np.full((length, len(channels)), np.nan, dtype=np.float32)
        for j, channel in enumerate(channels):
            case[: len(channel), j] = channel
        series.append(case)
    if not series:
        raise FptError(f"{path}: no series in the file")
    return series, np.asarray(labels).astype(str)
