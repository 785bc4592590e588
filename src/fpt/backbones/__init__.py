"""Backbones: the registry (`registry`), loading with the inits (`load`), the changes made at load
time (`surgery`), the export of a trained body (`export`), and the ViT and GGUF adapters."""

from fpt.backbones.export import bit_backbone_path, bit_backbone_recipe, export_backbone, load_exported_backbone
from fpt.backbones.load import (
    INITS,
    Backbone,
    backbone_depth,
    backbone_from_config,
    check_init,
    load_backbone,
    weights_hash,
)
from fpt.backbones.registry import (
    BackboneEntry,
    get_backbone_entry,
    list_backbones,
    register_backbone,
    require_backbone_entry,
)

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
