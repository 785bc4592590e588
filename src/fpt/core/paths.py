"""Where fpt keeps things, and the one way it writes a file.

- `cache_dir()`: converted backbone weights and fetched data (FPT_CACHE_DIR overrides ~/.cache/fpt);
  `data_dir(name)` is a dataset's folder inside it, where tasks look without --data-dir.
- `atomic_write(path, write)`: every file fpt writes (JSON, checkpoints, figures, reports, data)
  goes to a temporary name beside the target and is renamed over it, so a killed process never
  leaves half a file; the temporary name is per process, and removed if writing fails
  (`remove_stale_temporaries` removes those of writers killed outright).
- `write_json(path, data)`: every JSON file fpt writes; `fpt.core.jsonfile.read_json_object` reads one back.

Nothing here raises FptError (it imports no other fpt module): the bottom of the package.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Callable


def cache_dir() -> Path:
    """Where fpt keeps converted weights and generated data (FPT_CACHE_DIR overrides)."""
    return Path(os.environ.get("FPT_CACHE_DIR", Path.home() / ".cache" / "fpt"))


def data_dir(name: str) -> Path:
    """A dataset's default folder: where `fpt data get NAME` puts it and its task reads it."""
    return cache_dir() / "data" / name


def user_path(path: str | Path) -> Path:
    """`path` with a leading ~ or ~user expanded; left as written where that user does not exist
    (pathlib raises RuntimeError), so the caller's own "no such file" message names it."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        return Path(path)


def nearest_existing(path: Path) -> Path:
    """`path` or its closest ancestor that exists: where a write that makes missing folders would start."""
    while not path.exists():
        path = path.parent
    return path


def temporary_name(path: Path) -> Path:
    """A hidden sibling of `path` no other process will pick: .NAME.PID.RANDOM.tmp"""
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def remove_stale_temporaries(folder: Path) -> None:
    """Remove the temporaries (`temporary_name`) in `folder` whose writer is dead (killed mid-write:
    kill -9 leaves it no chance to clean up): files, and the folders `fpt export` writes."""
    import re
    import shutil

    for stale in Path(folder).glob(".*.tmp"):
        found = re.fullmatch(r"\..+\.(\d+)\.[0-9a-f]{8}\.tmp", stale.name)  # only names fpt makes
        if found and not _process_alive(found.group(1)):
            shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)


def _process_alive(pid_text: str) -> bool:
    try:
        os.kill(int(pid_text), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call write(temporary path), then rename it over `path`; on any failure nothing is left."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:  # name the file asked for, not the hidden temporary one the system refused
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def save_safetensors(path: str | Path, tensors: dict, metadata: dict[str, str]) -> Path:
    """safetensors' save_file, atomically (`atomic_write`); a write the system refuses (a full disk, a
    file-size limit) is an OSError naming `path` and its cause, as every other write's is: safetensors
    raises its own error type for it, which would end in a traceback."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    def write(tmp: Path) -> None:
        try:
            save_file(tensors, str(tmp), metadata=metadata)
        except SafetensorError as exc:
            if "I/O error" not in str(exc):
                raise
            cause = str(exc).split("I/O error:", 1)[1].strip()
            raise OSError(None, cause, str(tmp)) from None

    return atomic_write(path, write)


def write_text(path: str | Path, text: str) -> Path:
    """Write `text` to `path` atomically (`atomic_write`): a reader sees the old file or the whole new one."""
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def write_json(path: str | Path, data) -> Path:
    """Write `data` to `path` atomically as sorted, indented JSON; NaN or infinity is refused (ValueError)."""
    # allow_nan=False: bare NaN or Infinity is not JSON, and other tools would refuse the file
    return write_text(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")
