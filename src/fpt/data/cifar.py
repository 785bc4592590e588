"""CIFAR-10 batches: the official binary release or the python (pickled) release.

Binary (``cifar-10-batches-bin``): each record is 1 label byte then 3072 pixel bytes,
1024 red, 1024 green, 1024 blue, each a row-major 32x32 plane; 10000 records a file.
Python (``cifar-10-batches-py``): a Python 2 pickle of a dict with b"data" uint8
(10000, 3072) in the same pixel order and b"labels" a list of ints; read with the
restricted unpickler, never ``pickle.load``. https://www.cs.toronto.edu/~kriz/cifar.html
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fpt.core.errors import FptError
from fpt.data.safe_pickle import safe_loads

RECORD_BYTES = 1 + 3 * 32 * 32
SPLIT_FILES = {
    "train": [f"data_batch_{i}" for i in range(1, 6)],
    "test": ["test_batch"],
}
_WHERE = "download and unpack https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz (or cifar-10-python.tar.gz) there"


def _to_images(pixels: np.ndarray) -> np.ndarray:
    """(N, 3072) channel-planar rows -> (N, 32, 32, 3) height, width, channel."""
    return pixels.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).copy()


def _check_labels(labels: np.ndarray, path: Path) -> np.ndarray:
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise FptError(
            f"{path}: labels outside 0..9 (min {labels.min()}, max {labels.max()}); is this a CIFAR-100 file?"
        )
    return labels.astype(np.int64)


def read_binary_batch(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read one binary batch: images uint8 (N, 32, 32, 3), labels int64 (N,)."""
    path = Path(path)
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise FptError(f"{path}: cannot read CIFAR-10 batch ({e.strerror or e})") from None
    if data.size == 0 or data.size % RECORD_BYTES:
        raise FptError(
            f"{path}: {data.size} bytes is not a whole number of {RECORD_BYTES}-byte CIFAR-10 "
            f"records (official batches are {10000 * RECORD_BYTES} bytes); truncated? download it again"
        )
    records = data.reshape(-1, RECORD_BYTES)
    return _to_images(records[:, 1:]), _check_labels(records[:, 0], path)


def read_python_batch(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read one python-release batch safely: images uint8 (N, 32, 32, 3), labels int64 (N,)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise FptError(f"{path}: cannot read CIFAR-10 batch ({e.strerror or e})") from None
    # Python 2 pickle: its str keys come back as bytes, as in the official loading recipe.
    batch = safe_loads(raw, str(path), encoding="bytes")
    if not isinstance(batch, dict):
        raise FptError(f"{path}: expected a pickled dict with b'data' and b'labels', found {type(batch).__name__}")
    batch = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in batch.items()}
    data, labels = batch.get("data"), batch.get("labels")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        found = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise FptError(f"{path}: expected b'data' uint8 of shape (N, 3072), found {found}")
    try:
        labels = np.asarray(labels, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise FptError(f"{path}: expected b'labels' a list of ints, found {type(labels).__name__}") from None
    if labels.shape != (len(data),):
        raise FptError(f"{path}: {labels.size} labels for {len(data)} images")
    return _to_images(data), _check_labels(labels, path)


def _batch_files(directory: Path, split: str) -> tuple[list[Path], bool]:
    """The split's files and whether they are the binary release, preferring binary."""
    for sub, suffix, binary in (
        ("cifar-10-batches-bin", ".bin", True),
        (".", ".bin", True),
        ("cifar-10-batches-py", "", False),
        (".", "", False),
    ):
        files = [directory / sub / f"{name}{suffix}" for name in SPLIT_FILES[split]]
        if any(f.is_file() for f in files):
            missing = [f.name for f in files if not f.is_file()]
            if missing:
                raise FptError(
                    f"{files[0].parent}: CIFAR-10 {split} split incomplete, missing {', '.join(missing)}; {_WHERE}"
                )
            return files, binary
    raise FptError(
        f"no CIFAR-10 {split} batches in {directory}: expected cifar-10-batches-bin/"
        f"{SPLIT_FILES[split][0]}.bin or cifar-10-batches-py/{SPLIT_FILES[split][0]}; {_WHERE}"
    )


def load_cifar10_dir(directory: str | Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Load CIFAR-10 images uint8 (N, 32, 32, 3) and labels int64 (N,) for ``split``.

    ``directory`` holds ``cifar-10-batches-bin`` or ``cifar-10-batches-py`` (as torchvision
    leaves them) or is one of those folders. ``split`` is ``"train"`` (50000) or ``"test"``.
    """
    if split not in SPLIT_FILES:
        raise FptError(f"unknown CIFAR-10 split {split!r}: expected 'train' or 'test'")
    directory = Path(directory)
    if not directory.is_dir():
        raise FptError(f"CIFAR-10 directory {directory} does not exist; {_WHERE}")
    files, binary = _batch_files(directory, split)
    read = read_binary_batch if binary else read_python_batch
    parts = [read(f) for f in files]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
