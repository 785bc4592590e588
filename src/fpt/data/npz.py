"""A user's own sequence task as one ``.npz`` file of arrays.

Keys: ``x`` float (N, L, D) feature vectors or integer (N, L) token ids; ``y`` integer
class labels (N,); optional ``mask`` (N, L), true (or 1) on real positions. Loaded with
``allow_pickle=False``: an npz holding object arrays is refused, never unpickled.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np

from fpt.core.errors import FptError

_SAVE_HINT = "save with np.savez(path, x=..., y=..., mask=...)"


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of the .npz file at `path`, by name, read without unpickling; a missing, unreadable or object-array
    file is one line naming how to save it."""
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise FptError(f"{path}: a single .npy array, expected an .npz with x and y; {_SAVE_HINT}")
        with loaded:
            arrays = {key: loaded[key] for key in loaded.files}
    except FileNotFoundError:
        raise FptError(f"{path}: no such .npz file; {_SAVE_HINT}") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        # ValueError covers object arrays, which would need unpickling.
        raise FptError(f"{path}: unreadable .npz ({e}); {_SAVE_HINT} with numeric arrays") from None
    # numpy hands a member that is no .npy file back as its raw bytes; only ours must be arrays
    not_arrays = [key for key in ("x", "y", "mask") if key in arrays and not isinstance(arrays[key], np.ndarray)]
    if not_arrays:
        raise FptError(f"{path}: {', '.join(not_arrays)} not saved as arrays; {_SAVE_HINT}")
    return arrays


def load_npz_task(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Load and check ``x``, ``y`` and ``mask`` (all true when the file has none)."""
    path = Path(path)
    arrays = read_arrays(path)
    missing = [key for key in ("x", "y") if key not in arrays]
    if missing:
        raise FptError(
            f"{path}: missing array(s) {', '.join(missing)} (found {', '.join(arrays) or 'none'}); {_SAVE_HINT}"
        )
    x, y, mask = arrays["x"], arrays["y"], arrays.get("mask")

    if np.issubdtype(x.dtype, np.floating):
        if x.ndim != 3:
            raise FptError(f"{path}: float x must be (N, L, D) vectors, found shape {x.shape}")
        if x.shape[2] == 0:  # nothing for the input layer to read: torch would warn and train on nothing
            raise FptError(f"{path}: x's tokens hold 0 values each (shape {x.shape}); give each token at least one")
    elif np.issubdtype(x.dtype, np.integer):
        if x.ndim != 2:
            raise FptError(f"{path}: integer x must be (N, L) token ids, found shape {x.shape}")
        if x.size and x.min() < 0:
            raise FptError(f"{path}: token ids in x must be >= 0, found {x.min()}")
    else:
        raise FptError(f"{path}: x must hold floats or integers, found {x.dtype}")
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise FptError(f"{path}: y must be integer class labels of shape (N,), found {y.dtype} {y.shape}")
    if len(y) != len(x):
        raise FptError(f"{path}: x has {len(x)} examples but y has {len(y)}")
    if y.size and y.min() < 0:
        raise FptError(f"{path}: labels in y must be >= 0, found {y.min()}")
    if len(y) == 0 or x.shape[1] == 0:
        raise FptError(f"{path}: no examples or sequences of length 0 (x is {x.shape}); every example needs a token")
    if mask is None:
        mask = np.ones(x.shape[:2], dtype=bool)
    elif mask.shape != x.shape[:2] or not (mask.dtype == bool or np.isin(mask, (0, 1)).all()):
        raise FptError(
            f"{path}: mask must be (N, L) = {x.shape[:2]} of booleans or 0/1, found {mask.dtype} {mask.shape}"
        )
    mask = mask.astype(bool)
    empty = np.flatnonzero(~mask.any(1))
    if empty.size:
        raise FptError(
            f"{path}: {empty.size} example(s) have no true token in mask (first: index {empty[0]}); "
            "drop them or mark their real tokens"
        )
    return x, y.astype(np.int64), mask
