"""A backbone body's parameter shapes from its checkpoint's files alone: config.json and the
safetensors headers, read without transformers and without a weight. `fpt info` counts parameters
from them (issue 59: on MiniLM, 2.5 of its 4 s went to importing transformers and loading 90 MB of
weights that only their shapes were wanted from).

`body_shapes` answers for the common case, a pretrained body of a family fpt has rules for (GPT-2,
BERT, Llama) in a local folder, and returns None wherever only transformers can say: a hub id, a
ViT (fpt rebuilds its embeddings), a family without rules, a tensor that is neither a parameter
nor a known buffer, files that disagree with each other or with themselves. The caller then builds
the body (`load_backbone`), which names what is wrong. The counts are checked against the bodies
as built, for each family and with a head in the file, by tests/training/test_info_counts.py.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from fpt.backbones.catalog import source_of
from fpt.backbones.families import FAMILIES, Family
from fpt.backbones.surgery import MAX_SEQ_LEN

# bytes per element of each safetensors dtype, by the format's own names
_ITEM_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
_ITEM_BYTES |= {"I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}
_PARAMETER_DTYPES = ("F64", "F32", "F16", "BF16")  # what a trainable parameter is stored as
_HEADER_LIMIT = 100_000_000  # safetensors refuses a header over 100 MB
# where a config.json keeps the width and the number of blocks (GPT-2's names second)
_WIDTH_FIELDS, _DEPTH_FIELDS = ("hidden_size", "n_embd"), ("num_hidden_layers", "n_layer")


@dataclass(frozen=True)
class BodyShapes:
    """A body as `load_backbone` builds it, described by its files: its family (config.model_type),
    its width, and every parameter's shape by its name in the loaded body."""

    family: str
    hidden_size: int
    shapes: dict[str, tuple[int, ...]]


def body_shapes(name: str, seq_len: int | None = None) -> BodyShapes | None:
    """The pretrained body of backbone `name` as `load_backbone(name, seq_len=seq_len)` builds it
    (its token table and pooler dropped, its position table grown to `seq_len` rows), from its
    files; None where only building it can tell. A name that is no backbone, or a registered one
    not installed, is load_backbone's own FptError."""
    source, entry = source_of(name)
    folder = Path(entry.locate() if entry is not None else source)
    if not folder.is_dir():  # a hub id: transformers finds its files
        return None
    config = _read_config(folder)
    family = FAMILIES.get(config.get("model_type")) if config is not None else None
    if family is None or family.token_table is None:
        return None
    tensors = _checkpoint_tensors(folder)
    params = None if tensors is None else _body_parameters(tensors, family)
    if params is None:
        return None
    width, depth = _first_int(config, _WIDTH_FIELDS), _first_int(config, _DEPTH_FIELDS)
    token_table = params.pop(family.token_table, None)  # dropped: fpt feeds inputs_embeds
    if token_table is None or token_table[1:] != (width,) or not _whole_blocks(params, family.blocks, depth):
        return None
    for key in [key for key in params if key.startswith("pooler.")]:  # dropped (body.drop_unused_parts)
        del params[key]
    if not _grow_positions(params, family, seq_len):
        return None
    return BodyShapes(config["model_type"], width, params)


def read_header(path: Path) -> dict[str, tuple[str, tuple[int, ...]]] | None:
    """{tensor name: (dtype, shape)} of a safetensors file, from its header alone; None where the
    header does not describe the file exactly (cut short, padded, damaged), which safetensors refuses."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            length = int.from_bytes(handle.read(8), "little")
            if not 0 < length <= min(_HEADER_LIMIT, size - 8):
                return None
            header = json.loads(handle.read(length))
    except (OSError, ValueError):  # JSON and UTF-8 errors are ValueErrors
        return None
    if not isinstance(header, dict):
        return None
    header.pop("__metadata__", None)
    tensors, covered = {}, []
    for key, entry in header.items():
        described = _tensor(entry)
        if described is None:
            return None
        tensors[key], span = described
        covered.append(span)
    covered.sort()
    # the tensors tile the data exactly: no gap, no overlap, nothing past the end of the file
    edges = [0] + [edge for span in covered for edge in span] + [size - 8 - length]
    return tensors if all(edges[i] == edges[i + 1] for i in range(0, len(edges), 2)) else None


def _tensor(entry) -> tuple[tuple[str, tuple[int, ...]], tuple[int, int]] | None:
    """((dtype, shape), (start, end)) of one header entry, or None where it is malformed or its bytes
    are not its shape's."""
    if not isinstance(entry, dict):
        return None
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not (isinstance(shape, list) and isinstance(offsets, list) and len(offsets) == 2):
        return None
    if not (isinstance(dtype, str) and dtype in _ITEM_BYTES):
        return None
    if not all(type(n) is int and n >= 0 for n in shape + offsets):
        return None
    start, end = offsets
    if end - start != math.prod(shape) * _ITEM_BYTES[dtype]:
        return None
    return (dtype, tuple(shape)), (start, end)


def _read_config(folder: Path) -> dict | None:
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def _checkpoint_tensors(folder: Path) -> dict[str, tuple[str, tuple[int, ...]]] | None:
    """Every tensor of the folder's safetensors weights: model.safetensors, else the shards its
    index names (transformers' order of preference)."""
    single = folder / "model.safetensors"
    if single.is_file():
        files = [single]
    else:
        try:
            weight_map = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
            files = sorted({folder / shard for shard in weight_map.values()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
    tensors: dict = {}
    for path in files:
        part = read_header(path)
        if part is None or part.keys() & tensors.keys():
            return None
        tensors |= part
    return tensors


def _body_parameters(tensors: dict, family: Family) -> dict[str, tuple[int, ...]] | None:
    """The parameters the base model takes from these tensors, by its names: those under the base
    prefix where the file has a head too (the head's are skipped, as transformers skips them), the
    family's known buffers left out; None where a tensor that is not a parameter's dtype remains."""
    prefix = f"{family.base_prefix}."
    if family.base_prefix is not None and any(key.startswith(prefix) for key in tensors):
        tensors = {key.removeprefix(prefix): value for key, value in tensors.items() if key.startswith(prefix)}
    buffers = None if family.checkpoint_buffers is None else re.compile(family.checkpoint_buffers)
    params = {}
    for key, (dtype, shape) in tensors.items():
        if buffers is not None and buffers.search(key):
            continue
        if dtype not in _PARAMETER_DTYPES:  # an index buffer fpt does not know, or a quantised weight
            return None
        params[key] = shape
    return params


def _first_int(config: dict, fields: tuple[str, ...]) -> int | None:
    value = next((config[key] for key in fields if key in config), None)
    return value if type(value) is int and value > 0 else None


def _whole_blocks(params: dict[str, tuple[int, ...]], blocks: str, depth: int | None) -> bool:
    """Blocks 0 to depth - 1, each with block 0's tensors and shapes, and no other: a file cut short
    or a config that does not fit it is left to the loader, which names what is missing."""
    pattern = re.compile(rf"{re.escape(blocks)}\.(\d+)\.(.+)")
    found: dict[int, dict[str, tuple[int, ...]]] = {}
    for key, shape in params.items():
        match = pattern.fullmatch(key)
        if match:
            found.setdefault(int(match[1]), {})[match[2]] = shape
    if depth is None or sorted(found) != list(range(depth)):
        return False
    return all(block == found[0] for block in found.values())


def _grow_positions(params: dict[str, tuple[int, ...]], family: Family, seq_len: int | None) -> bool:
    """The learned position table as `adapt` leaves it for a task `seq_len` tokens long: grown to
    that many rows (surgery.extend_positions); False where the table is missing or adapt refuses."""
    if seq_len is not None and seq_len > MAX_SEQ_LEN:
        return False
    if family.position_table is None:
        return True
    key = f"{family.position_table}.weight"
    table = params.get(key)
    if table is None or len(table) != 2:
        return False
    if seq_len is not None and seq_len > table[0]:
        params[key] = (seq_len, table[1])
    return True
