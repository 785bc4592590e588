"""Backbones: the registry (`registry`), loading with the inits (`load`), the changes made at load
time (`surgery`), the export of a trained body (`export`), and the ViT and GGUF adapters."""

from fpt.backbones.body import Backbone, backbone_from_config, weights_hash
from fpt.backbones.catalog import (
    BackboneEntry,
    get_backbone_entry,
    list_backbones,
    register_backbone,
    require_backbone_entry,
)
from fpt.backbones.load import INITS, backbone_depth, check_init, load_backbone
from fpt.backbones.saved_body import bit_backbone_path, bit_backbone_recipe, export_backbone, load_exported_backbone

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
