"""A trained backbone body as a safetensors file, and back: the paper's "Bit" variant is MiniLM
(or any backbone) fully trained on Bit Memory from random init, exported here, then frozen."""

from __future__ import annotations

import re
from pathlib import Path

import torch
from torch import nn

from fpt.core.errors import MISSING_BIT_BACKBONE, FptError
from fpt.core.paths import cache_dir, save_safetensors

EXPORT_FORMAT = "fpt-backbone-1"


def bit_backbone_path(name: str) -> Path:
    """Where `--init bit` looks for the Bit Memory-trained weights of backbone `name`."""
    return cache_dir() / "backbones" / "bit-memory" / (re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".safetensors")


def bit_backbone_recipe(name: str) -> str:
    """The shell commands that make `--init bit`'s weights for backbone `name`: train it on Bit Memory from
    random init with every weight trained, then `fpt export-backbone` to bit_backbone_path(name)."""
    return (
        f"fpt train --task bit-memory --backbone {name} --init random --policy full --target-accuracy 0.99 "
        f"--steps 40000 --out runs/bit-{name} && fpt export-backbone runs/bit-{name} --out {bit_backbone_path(name)}"
    )


def export_backbone(model: nn.Module, path: Path, metadata: dict[str, str]) -> None:
    """Write a backbone body's weights (fp32) as safetensors, atomically."""

    tensors = {k: v.detach().float().contiguous() for k, v in model.state_dict().items() if v.is_floating_point()}
    save_safetensors(path, tensors, {"format": EXPORT_FORMAT, **metadata})


@torch.no_grad()
def load_exported_backbone(model: nn.Module, path: Path, name: str) -> None:
    """Copy weights written by `export_backbone` into a freshly built body of the same architecture."""
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        raise FptError(
            f"no Bit Memory-trained {name} at {path}; make it with: {bit_backbone_recipe(name)}",
            kind=MISSING_BIT_BACKBONE,
        )
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
