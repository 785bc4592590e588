"""Loading a backbone body: a name -> a pretrained (or re-initialised) transformer body, ready
to be frozen, with every change a run asks for made here, at load time (fpt.backbones.surgery).

A name is one of the registered backbones (`list_backbones()`), a local directory holding a
Hugging Face checkpoint, or a Hugging Face hub id. Whatever the source, the result is the *base*
model (no LM head) with its token-embedding table replaced by a stub: fpt feeds `inputs_embeds`,
so the table and the head are never used and are not kept in memory. The body as loaded, and
the surgery done to it after its weights are fixed, are fpt.backbones.body.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from safetensors import SafetensorError
from torch import nn

import fpt.backbones.control_bodies as controls
import fpt.backbones.surgery as surgery
from fpt.backbones.body import (
    Backbone,
    adapt,
    drop_unused_parts,
    frozen_backbone,
    weights_hash,
    with_small_vocabulary,
)
from fpt.backbones.catalog import BackboneEntry, check_init, source_of
from fpt.backbones.families import native_attention
from fpt.backbones.saved_body import bit_backbone_path, load_exported_backbone
from fpt.core.errors import MISSING_BACKBONE, TOO_SHALLOW, FptError
from fpt.core.paths import user_path


def _load_config(source: str, name: str):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source, trust_remote_code=False)
    except Exception as exc:  # transformers raises many types for a bad field (strict dataclass checks, dtype names)
        if Path(source).is_dir():
            raise FptError(
                f"cannot read the config of backbone directory {source} ({str(exc).splitlines()[0][:120]}); "
                "save it again with save_pretrained"
            ) from None
        raise FptError(
            f"cannot load backbone {name!r}: not a registered name (see `fpt backbones`), not a local "
            f"directory, and not reachable on the Hugging Face hub ({type(exc).__name__})"
        ) from None


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
    less at the loading peak. Every other tensor must still match (`_check_loaded`). Where a
    family cannot be built that way, the plain load is used. Only safetensors files are read: a
    pytorch_model.bin is a pickle.
    """
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    small = with_small_vocabulary(config)
    load = dict(
        dtype=dtype,
        trust_remote_code=False,
        use_safetensors=True,
        output_loading_info=True,
        ignore_mismatched_sizes=True,
    )  # what does not fit is refused by _check_loaded, in one line
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # transformers' own multi-line load report says the same
    try:
        if small is not None:
            try:
                model, info = AutoModel.from_pretrained(source, config=small, **load)
                _check_loaded(info, source, token_rows=(small.vocab_size, config.vocab_size))
                model.config.vocab_size = config.vocab_size  # the architecture's own value, for anyone reading it
                return model
            except (OSError, ValueError, SafetensorError, FptError, MemoryError):  # the plain load would fail too
                raise
            except Exception:  # pragma: no cover - a family whose modules depend on the vocabulary size
                pass
        model, info = AutoModel.from_pretrained(source, **load)
        _check_loaded(info, source)
        return model
    finally:
        hf_logging.set_verbosity(verbosity)


def _check_loaded(info: dict, source: str, token_rows: tuple[int, int] | None = None) -> None:
    """Refuse a checkpoint whose tensors do not all fit its config: transformers would initialise
    the missing and misshapen ones at random and only log it, and the run would call a mostly
    random body pretrained. Allowed: the token table declared small on purpose (`token_rows`:
    the model's rows, the checkpoint's) and BERT's pooler, both dropped by fpt."""
    missing = sorted(k for k in info["missing_keys"] if not k.startswith("pooler."))
    misshapen = sorted(
        key for key, saved, built in info["mismatched_keys"] if token_rows is None or (built[0], saved[0]) != token_rows
    )
    if missing or misshapen:
        found = "; ".join(
            f"{len(keys)} {what}, e.g. {keys[0]}"
            for keys, what in ((missing, "missing"), (misshapen, "of another shape than config.json says"))
            if keys
        )
        raise FptError(
            f"backbone {source}: its weights do not fit its config.json ({found}); give a folder "
            "written by save_pretrained (an `fpt export --format hf` folder is read by `fpt predict`)"
        )


def _architecture(name: str, source: str | None, entry: BackboneEntry | None, init: str):
    """(config, where the weights are): offline where the registry knows the architecture and no
    weights are needed."""
    if init in ("random", "bit") and entry is not None and entry.offline_config is not None:
        return entry.offline_config(), None  # the architecture is known without any download
    if entry is not None:
        source = entry.locate()
    try:
        return _load_config(source, name), source
    except FptError:
        if entry is None:
            raise
        raise FptError(
            f"backbone {name!r} is not on this machine and the Hugging Face hub cannot be "
            f"reached; get it: {entry.how_to_get}",
            kind=MISSING_BACKBONE,
        ) from None


def _depth(config) -> int | None:
    return next((getattr(config, key) for key in ("num_hidden_layers", "n_layer") if hasattr(config, key)), None)


def _check_layers(config, layers: int | None, name: str, init: str) -> None:
    """Random init builds any depth (the architecture is only a config); the others keep blocks
    that exist."""
    if layers is None:
        return
    if layers < 1:
        raise FptError(f"--layers must be at least 1, got {layers}")
    depth = _depth(config)
    if init != "random" and depth is not None and layers > depth:
        raise FptError(
            f"--layers must be between 1 and {depth} for {name} (its {init} blocks), got {layers}; "
            f"a {layers}-layer model needs a deeper backbone, or --init random",
            kind=TOO_SHALLOW,
        )


def backbone_depth(name: str) -> int | None:
    """The number of blocks a backbone has as published, where that is known on this machine
    without a download (a registered architecture, an installed package, a local directory)."""
    try:
        source, entry = source_of(name)
        if entry is not None and entry.offline_config is not None:
            return _depth(entry.offline_config())
        if entry is not None and not entry.is_available():
            return None
        if entry is None and not user_path(name).is_dir():
            return None  # a hub id: only its download would say
        return _depth(_architecture(name, source, entry, "pretrained")[0])
    except FptError:
        return None


def _build_body(
    config, source: str | None, name: str, init: str, seed: int, layers: int | None, dtype: torch.dtype
) -> nn.Module:
    """The transformer body with pretrained weights, or freshly initialised (seeded)."""
    from transformers import AutoModel

    try:
        if init in ("random", "bit"):
            if init == "random" and layers is not None:  # exactly the blocks asked for, more than published too
                for key in ("num_hidden_layers", "n_layer"):
                    if hasattr(config, key):
                        setattr(config, key, layers)
            torch.manual_seed(seed)
            return AutoModel.from_config(config, dtype=dtype)
        return _from_pretrained_without_token_table(source, config, dtype)
    except (MemoryError, OSError, ValueError, SafetensorError, RuntimeError) as exc:  # RuntimeError: sizes such as -1
        if isinstance(exc, MemoryError) or "allocate" in str(exc):
            raise FptError(
                f"not enough memory to build backbone {name!r}"
                + (f" with {layers:,} layers" if layers else "")
                + "; use fewer --layers or a smaller backbone"
            ) from None
        no_weights = "safetensors" in str(exc) and isinstance(exc, OSError)  # a hub repo of .bin files only
        if no_weights or (source is not None and Path(source).is_dir() and not any(Path(source).glob("*.safetensors"))):
            raise FptError(
                f"backbone {source} has no .safetensors weights; fpt does not unpickle "
                "pytorch_model.bin files: save it again with save_pretrained (safetensors)"
            ) from None
        raise FptError(
            f"cannot build backbone {name!r} from {source or 'its config'} ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:120]}); its config.json or weights may be damaged or "
            "truncated: save or download them again"
        ) from None


def _check_request(init: str, body: str, layers: int | None, dropout: float | None, attention_dropout) -> None:
    """load_backbone's arguments that are wrong before anything is read."""
    check_init(init)
    controls.check_body(body, layers)
    surgery.check_dropout_rates(0.0 if dropout is None else dropout, attention_dropout)


def load_backbone(
    name: str = "minilm",
    init: str = "pretrained",
    seed: int = 0,
    layers: int | None = None,
    dtype: torch.dtype = torch.float32,
    *,
    seq_len: int | None = None,
    dropout: float | None = 0.1,
    attention_dropout: float | None = None,
    attention: str | None = None,
    checkpointing: bool = False,
    compile: bool = False,
    body: str = controls.BACKBONE,
) -> Backbone:
    """Load a backbone body by name, re-initialise it if asked, drop its unused token table.

    init: "pretrained" (the weights as published), "random" (the architecture's default init,
    seeded), "stats" (each tensor drawn from a normal with the pretrained tensor's mean and std)
    or "bit" (the weights of this architecture fully trained on Bit Memory from random init, as
    exported by `fpt export-backbone`; the paper's "Bit" variant).

    Made at load time, for a run: `layers` keeps the first K blocks (with random init, builds K
    blocks of the architecture, as many as asked); `seq_len` grows a learned
    position table shorter than the task (by interpolation); `dropout` / `attention_dropout` set
    the body's rates (default: the paper's 0.1 for both; attention None: the same as dropout;
    both None: as published); `attention` "causal" masks an encoder's self-attention as GPT-2's
    ("bidirectional" is what an encoder does anyway; None: as pretrained); `checkpointing`
    recomputes blocks in backward; `compile` runs the body through torch.compile. `body` other
    than "backbone" replaces the blocks with a control (fpt.backbones.control_bodies), seeded by `seed`,
    keeping the position table as loaded.
    """
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # fpt draws its own progress; loading is a second or two
    _check_request(init, body, layers, dropout, attention_dropout)
    source, entry = source_of(name)
    config, source = _architecture(name, source, entry, init)
    _check_layers(config, layers, name, init)
    surgery.attention_switch(config.model_type, attention)  # refused before any weights are read
    model = drop_unused_parts(_build_body(config, source, name, init, seed, layers, dtype))
    family = model.config.model_type
    if init == "bit":
        load_exported_backbone(model, bit_backbone_path(name), name)
    if layers is not None:
        blocks = surgery.block_count(model, family)
        if not 1 <= layers <= blocks:
            raise FptError(f"--layers must be between 1 and {blocks} for this backbone, got {layers}")
        surgery.keep_first_layers(model, family, layers)
    if init == "stats":
        _statistics_init(model, seed)
    backbone = frozen_backbone(model, name, init, weights_hash(model))
    if body != controls.BACKBONE:
        adapt(backbone, seq_len, dropout, attention_dropout, attention, checkpointing=False, compile=False)
        return _control(backbone, body, seed, dtype, seq_len, dropout, attention_dropout, attention, compile)
    adapt(backbone, seq_len, dropout, attention_dropout, attention, checkpointing, compile)
    return backbone


def _control(
    loaded: Backbone,
    body: str,
    seed: int,
    dtype: torch.dtype,
    seq_len: int | None,
    dropout: float | None,
    attention_dropout: float | None,
    attention: str | None,
    compile: bool,
) -> Backbone:
    """`loaded` (adapted: positions grown, rates and attention set) with its blocks replaced by
    control `body`, keeping its position table's rows; the new weights are drawn from `seed`."""
    family, config = loaded.family, loaded.model.config
    table = controls.control_positions(loaded.model, loaded.family, body, seq_len)
    rate = 0.0 if dropout is None else dropout
    torch.manual_seed(seed)  # as a random init is seeded (_build_body)
    if body == "block":
        model = _one_fresh_block(config, dtype)
    else:
        causal = body == "attention" and controls.causal_control(attention or native_attention(family), family)
        rows = table if table is not None else controls.fresh_position_table(seq_len, config.hidden_size)
        norms = controls.outer_norms(loaded.model, family)
        model = controls.small_body(
            body, config, rows, causal, rate, rate if attention_dropout is None else attention_dropout, norms
        ).to(dtype)
    backbone = Backbone(
        name=loaded.name,
        init=loaded.init,
        model=model,
        family=model.config.model_type,
        hidden_size=config.hidden_size,
        max_positions=loaded.max_positions,
        weights_hash="",
        extended_positions=loaded.extended_positions,
        body=body,
    )
    if body == "block":
        adapt(backbone, seq_len, dropout, attention_dropout, attention, checkpointing=False, compile=False)
        fresh = surgery.position_table(model, family)
        if table is not None:
            with torch.no_grad():
                fresh.weight.copy_(table.weight)
        controls.copy_outside_blocks(loaded.model, model, family)  # its norms, BERT's token-type vector
    if table is not None:
        backbone.positions = f"the backbone's own table ({table.num_embeddings} rows, --init {loaded.init}), trained"
    else:
        backbone.positions = (
            "rotary, as the backbone's"
            if body == "block"
            else f"a fresh learned table of {model.positions.num_embeddings} rows (the backbone has none)"
        )
    backbone.weights_hash = weights_hash(model)  # the body as built: seeded, so a resume rebuilds the same
    if compile:
        backbone.run = surgery.CompiledBackbone(model)
    return backbone


def _one_fresh_block(config, dtype: torch.dtype) -> nn.Module:
    """The architecture of `config` with one block, at its default init (from the global RNG)."""
    from transformers import AutoModel

    one = copy.deepcopy(config)
    controls.set_layer_count(one, 1)
    small = with_small_vocabulary(one)
    model = AutoModel.from_config(small or one, dtype=dtype)
    if small is not None:
        model.config.vocab_size = one.vocab_size
    return drop_unused_parts(model)
