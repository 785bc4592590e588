"""A loaded backbone body (`Backbone`) and what is done to it once its weights are fixed: the
unused parts dropped, the run's surgery (`adapt`: positions grown, rates and attention set,
checkpointing, compile), and the rebuild of a saved body from its config (`backbone_from_config`).
Loading by name, with the inits, is fpt.backbones.load.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

import fpt.backbones.control_bodies as controls
import fpt.backbones.surgery as surgery
from fpt.backbones.vit import ViTBody, is_vit
from fpt.core.devices import attention_kernel
from fpt.core.errors import FptError


class UnusedTokenTable(nn.Module):
    """Stands in for the dropped token-embedding table: fpt always passes inputs_embeds."""

    def forward(self, input_ids):  # pragma: no cover - reaching this is a bug
        """Raises RuntimeError: fpt feeds a body vectors (inputs_embeds), never token ids."""
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
    weights_hash: str  # identity of the weights as loaded (before surgery); a checkpoint is bound to it
    extended_positions: tuple[int, int] | None = None  # (rows published, rows now) if the table grew
    dropout: float | None = None  # the rates set at load time (None: as published)
    attention_dropout: float | None = None
    attention: str | None = None  # causal | bidirectional as set at load time (None: as pretrained)
    run: Callable | None = None  # the body, or its torch.compile'd call
    body: str = controls.BACKBONE  # or a control that replaced the blocks (fpt.backbones.control_bodies)
    positions: str | None = None  # a control's: where its positions come from, in words

    def __call__(self, **kwargs):
        with self._attention_kernel(kwargs["inputs_embeds"]):
            return (self.run or self.model)(**kwargs)

    def _attention_kernel(self, embeds: torch.Tensor) -> contextlib.AbstractContextManager:
        """fpt.core.devices.attention_kernel, where the kernel may change from call to call: not in a
        body that recomputes its blocks in backward (the recompute, outside this call, would take
        the other kernel and fail) nor in a compiled one (torch.compile does not see the choice)."""
        compiled = isinstance(self.run, surgery.CompiledBackbone) and self.run.active
        if compiled or surgery.is_checkpointing(self.model):
            return contextlib.nullcontext()
        kind = embeds.device.type
        dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else embeds.dtype
        # gradients flow back through attention only if something before it trains
        backward = torch.is_grad_enabled() and (
            embeds.requires_grad or any(p.requires_grad for p in self.model.parameters())
        )
        return attention_kernel(embeds.device, dtype, embeds.shape[1], backward)


def with_small_vocabulary(config):
    """A copy of `config` declaring a one-row vocabulary (up to its pad id), or None where it has
    no vocabulary: fpt drops the token table, so it need not be built full size."""
    vocab = getattr(config, "vocab_size", None)
    if not (isinstance(vocab, int) and vocab > 1):
        return None
    small = copy.deepcopy(config)
    pad = getattr(small, "pad_token_id", None)
    small.vocab_size = pad + 1 if isinstance(pad, int) and 0 <= pad < vocab else 1
    return small


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


def drop_unused_parts(model: nn.Module) -> nn.Module:
    """ViT: patch embedding, CLS token and pooler; others: the token table (inputs_embeds is fed
    instead) and BERT's pooler."""
    if is_vit(model):
        return ViTBody(model)
    model.set_input_embeddings(UnusedTokenTable())
    if getattr(model, "pooler", None) is not None:
        model.pooler = None
    return model


def frozen_backbone(model: nn.Module, name: str, init: str, weights_hash: str) -> Backbone:
    """`model` frozen, with the facts fpt reads about it: family, width, position-table rows."""
    model.requires_grad_(False)
    table = surgery.position_table(model, model.config.model_type)
    return Backbone(
        name=name,
        init=init,
        model=model,
        family=model.config.model_type,
        hidden_size=model.config.hidden_size,
        max_positions=None if table is None else table.num_embeddings,
        weights_hash=weights_hash,
    )


def adapt(
    backbone: Backbone,
    seq_len: int | None,
    dropout: float | None,
    attention_dropout: float | None,
    attention: str | None,
    checkpointing: bool,
    compile: bool,
) -> None:
    """The run-specific surgery, after the weights' identity is fixed."""
    model, family = backbone.model, backbone.family
    if seq_len is not None and seq_len > surgery.MAX_SEQ_LEN:  # a typo in --n-bits or --max-len, not a real task
        raise FptError(
            f"the task's sequences are {seq_len:,} tokens; fpt takes at most {surgery.MAX_SEQ_LEN:,}: "
            "lower --n-bits or --max-len, or raise --patch-size"
        )
    if seq_len is not None:
        published = surgery.extend_positions(model, family, seq_len)
        if published is not None:
            backbone.extended_positions, backbone.max_positions = (published, seq_len), seq_len
    backbone.dropout, backbone.attention_dropout = dropout, attention_dropout
    if dropout is not None or attention_dropout is not None:
        surgery.set_dropout(model, family, dropout, dropout if attention_dropout is None else attention_dropout)
    surgery.set_attention(model, family, attention)
    backbone.attention = attention
    if hasattr(model.config, "use_cache"):
        model.config.use_cache = False  # a decoder's key/value cache is never read here
    if checkpointing:
        surgery.enable_checkpointing(model)
    if compile:
        backbone.run = surgery.CompiledBackbone(model)


def backbone_from_config(
    config: dict,
    *,
    name: str,
    init: str,
    weights_hash: str,
    seq_len: int | None = None,
    dropout: float | None = None,
    attention_dropout: float | None = None,
    attention: str | None = None,
) -> Backbone:
    """The body a saved model describes (`FrozenPretrainedTransformer.from_pretrained`), built
    offline from its Hugging Face config (a dict, as `to_dict` gives it) with its weights left
    for the caller to load. Fewer blocks and a grown position table are in the config already; a
    ViT's table grows here, as at load time."""
    from transformers import AutoConfig, AutoModel

    try:
        surgery.check_dropout_rates(dropout, attention_dropout)
    except FptError:
        raise FptError(
            f"cannot rebuild backbone {name!r}: its saved dropout rates ({dropout!r}, {attention_dropout!r}) "
            "are not in [0, 1); export the run again"
        ) from None
    fields = dict(config)
    try:
        architecture = AutoConfig.for_model(fields.pop("model_type", None), **fields)
        small = with_small_vocabulary(architecture)
        model = AutoModel.from_config(small or architecture)
    except MemoryError:
        raise
    except Exception as exc:  # transformers raises many types for a bad field (strict dataclass checks, sizes)
        raise FptError(
            f"cannot rebuild backbone {name!r} from its saved config ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:120]}); export the run again"
        ) from None
    if small is not None:
        model.config.vocab_size = architecture.vocab_size
    backbone = frozen_backbone(drop_unused_parts(model), name, init, weights_hash)
    adapt(backbone, seq_len, dropout, attention_dropout, attention, checkpointing=False, compile=False)
    return backbone
