"""Backbones: the registry (`registry`), loading with the inits (`load`), the changes made at load
time (`surgery`), the export of a trained body (`export`), and the ViT and GGUF adapters.

The names below are imported when first used (PEP 562): `fpt backbones` reads the catalog alone,
without torch or transformers, which `load`, `body` and `saved_body` import (issue 59)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fpt.backbones.body import Backbone, backbone_from_config, weights_hash
    from fpt.backbones.catalog import (
        INITS,
        BackboneEntry,
        check_init,
        get_backbone_entry,
        list_backbones,
        register_backbone,
        require_backbone_entry,
    )
    from fpt.backbones.load import backbone_depth, load_backbone
    from fpt.backbones.saved_body import (
        bit_backbone_path,
        bit_backbone_recipe,
        export_backbone,
        load_exported_backbone,
    )

_HOMES = {
    "body": ("Backbone", "backbone_from_config", "weights_hash"),
    "catalog": (
        "INITS",
        "BackboneEntry",
        "check_init",
        "get_backbone_entry",
        "list_backbones",
        "register_backbone",
        "require_backbone_entry",
    ),
    "load": ("backbone_depth", "load_backbone"),
    "saved_body": ("bit_backbone_path", "bit_backbone_recipe", "export_backbone", "load_exported_backbone"),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "INITS",
    "Backbone",
    "BackboneEntry",
    "backbone_depth",
    "backbone_from_config",
    "bit_backbone_path",
    "bit_backbone_recipe",
    "check_init",
    "export_backbone",
    "get_backbone_entry",
    "list_backbones",
    "load_backbone",
    "load_exported_backbone",
    "register_backbone",
    "require_backbone_entry",
    "weights_hash",
]
