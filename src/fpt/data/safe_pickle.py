"""Unpickle dataset files without letting them run code.

CIFAR-10's python batches and TAPE's LMDB records are pickles. A pickle may name any
importable callable (``os.system``...), so a plain ``pickle.loads`` on a downloaded file
runs whatever the file says. This unpickler resolves only the few numpy names needed to
rebuild arrays and scalars; builtin containers and numbers need no lookup at all.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import numpy as np

from fpt.core.errors import FptError

# The installed numpy's own reconstruction functions, taken from how it pickles: their
# module moved (numpy.core -> numpy._core in numpy 2), files name either.
_RECONSTRUCT = np.empty(0).__reduce__()[0]
_SCALAR = np.int64(0).__reduce__()[0]
_FROMBUFFER = np.empty(1).__reduce_ex__(5)[0]


class _Refused(pickle.UnpicklingError):
    """The pickle names something outside the allowed list."""


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    """Python 3 writes bytes as ``_codecs.encode(str, 'latin1')`` under protocol 2."""
    if encoding not in ("latin1", "latin-1"):
        raise _Refused(f"refusing _codecs.encode with encoding {encoding!r}")
    return text.encode("latin1")


_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy.core.multiarray", "scalar"): _SCALAR,
    ("numpy._core.multiarray", "scalar"): _SCALAR,
    ("numpy.core.numeric", "_frombuffer"): _FROMBUFFER,
    ("numpy._core.numeric", "_frombuffer"): _FROMBUFFER,
    ("_codecs", "encode"): _latin1_encode,
}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise _Refused(f"refusing to load {module}.{name}") from None

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("refusing a persistent id")


def safe_loads(data: bytes, source: str, encoding: str = "ASCII") -> Any:
    """Unpickle ``data`` allowing only builtin values and numpy arrays / scalars.

    ``source`` names the file (and record) for the error message. ``encoding="bytes"``
    reads Python 2 pickles (CIFAR-10) with their str keys as bytes.
    """
    try:
        return _RestrictedUnpickler(io.BytesIO(data), encoding=encoding).load()
    except _Refused as e:  # never run: the file may be malicious
        raise FptError(f"{source}: not a plain data pickle ({e}); expected the original dataset file") from None
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
        UnicodeDecodeError,
        MemoryError,
    ) as e:
        raise FptError(
            f"{source}: corrupt or truncated pickle ({type(e).__name__}: {e}); download the file again"
        ) from None
