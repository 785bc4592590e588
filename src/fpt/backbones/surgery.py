"""Changes made to a loaded backbone body before it is wrapped: fewer blocks, a longer position
table, dropout rates, causal attention on an encoder, 16-bit storage of frozen weights, activation
checkpointing, compilation.

The speed ones are measured in benchmarks/perf.py. Exact (same numbers as the plain body): fewer blocks,
checkpointing (each block recomputed in backward: memory falls by an order of magnitude for
about a third more compute). They change numerics: bf16 storage with autocast (by default only
where the device computes bf16 natively: --precision auto, `auto_precision`), torch.compile (opt-in).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from fpt.backbones.families import (
    BIDIRECTIONAL,
    CausalSwitch,
    attention_dropout_sites,
    blocks_path,
    causal_switch,
    native_attention,
    position_table_path,
)
from fpt.core import runtime
from fpt.core.choices import ATTENTIONS, AUTO, BACKBONE, PRECISION_CHOICES
from fpt.core.errors import FptError

# int8: the frozen linear layers stored in int8 (fpt.backbones.int8), their products in fp32; int8-bf16: the
# same storage, products in bf16 (the fast one where bf16 is native). fbgemm's int8 products are not offered:
# 1.18x a MiniLM step on an AVX2 CPU, moving logits 13-20%; where bf16 is native, no faster than bf16
# (benchmarks/results/int8/)
PRECISIONS = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "int8": torch.float32,
    "int8-bf16": torch.bfloat16,
}
# auto (fpt.core.choices.AUTO): one of PRECISIONS picked for the device (auto_precision), before the model is
# built and written into config.json as picked, so a run resumed, scored or exported elsewhere keeps its dtype;
# PRECISION_CHOICES, auto and these names, is there for the option parser (tests/cli/test_startup.py checks both agree)


# Longer sequences than any attention here could take in memory: their position table alone is GBs.
MAX_SEQ_LEN = 1 << 20


def check_precision(
    precision: str, body: str = BACKBONE, compiled: bool = False, device_type: str | None = None
) -> None:
    """--precision NAME is auto or a name `compute_dtype` knows, and fits the run (checked before anything is
    built, and on the device once it is resolved): int8 stores frozen layers only, and a control `body` trains
    every layer it has; int8 under --compile is untested (a custom backward); fp16's loss scaler is CUDA's."""
    if precision != AUTO:
        compute_dtype(precision)
    if precision.startswith("int8") and body != BACKBONE:
        raise FptError(f"--precision {precision} stores frozen weights, and --body {body} trains all it has: drop one")
    if precision.startswith("int8") and compiled:
        raise FptError(f"--precision {precision} with --compile is untested (a custom backward): drop one of them")
    if precision == "fp16" and device_type not in (None, "cuda"):
        raise FptError(f"--precision fp16 (with a loss scaler) is for CUDA GPUs; on {device_type} use bf16 or fp32")


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype of --precision NAME (the one lookup of that name); auto must be resolved first."""
    if precision == AUTO:
        raise FptError("--precision auto is resolved before a model is built (fpt.training.build.resolve_precision)")
    if precision not in PRECISIONS:
        raise FptError(f"unknown --precision {precision!r}; choose one of {', '.join(PRECISION_CHOICES)}")
    if PRECISIONS[precision] == torch.bfloat16 and not torch.backends.mkldnn.is_available():
        raise FptError(f"--precision {precision} needs a torch build with oneDNN; use --precision fp32")
    return PRECISIONS[precision]


def auto_precision(device: torch.device) -> tuple[str, str]:
    """What --precision auto picks on `device`, and why (a clause for the line that says so): bf16
    where the device computes it natively, fp32 elsewhere. Never fp16 or int8: both change more
    than speed (a loss scaler; 3-5% on the logits)."""
    if device.type == "cuda":
        name, (major, minor) = torch.cuda.get_device_name(device), torch.cuda.get_device_capability(device)
        if major >= 8:  # Ampere (compute capability 8.0) and later have bf16 tensor cores
            return "bf16", f"{name} computes bf16 natively (CUDA compute capability {major}.{minor})"
        return "fp32", f"{name} has no native bf16 (compute capability {major}.{minor}; bf16 needs 8.0 or later)"
    if device.type == "mps":
        # bf16 autocast on MPS needs macOS 14, and fpt has not measured it on any Apple GPU (earlier ones have
        # no bf16 arithmetic): fp32 is exact and runs on all of them
        return "fp32", "bf16 on Apple's MPS is not measured by fpt (fp32 is exact on every Apple GPU)"
    cpu = f"this CPU ({runtime.cpu_model()})"
    native = runtime.native_bf16()  # looked up here, where a test can replace it
    if native and torch.backends.mkldnn.is_available():
        return "bf16", f"{cpu} computes bf16 natively (AVX512-BF16, AMX or Arm BF16)"
    if native:
        return "fp32", "this torch build has no oneDNN, which CPU bf16 needs"
    if native is None:
        return "fp32", f"cannot tell whether {cpu} has native bf16 (emulated, it is up to 20x slower than fp32)"
    return "fp32", f"{cpu} has no native bf16 (AVX512-BF16 or AMX): emulated, it is up to 20x slower than fp32"


def check_dropout_rates(dropout: float, attention_dropout: float | None) -> None:
    """Both rates in [0, 1); attention_dropout None means the same as dropout."""
    for name, value in (("dropout", dropout), ("attention-dropout", attention_dropout)):
        if value is not None and not 0.0 <= value < 1.0:
            raise FptError(f"--{name} must be in [0, 1), got {value}")


def _blocks(model: nn.Module, family: str) -> tuple[nn.Module, str]:
    """(the module holding the transformer blocks, its attribute naming them)."""
    path = blocks_path(model, family)
    if path is None:
        raise FptError(f"cannot find the transformer blocks of {type(model).__name__} to apply --layers")
    parent, _, attr = path.rpartition(".")
    return model.get_submodule(parent), attr


def block_count(model: nn.Module, family: str) -> int:
    """The transformer blocks the body has."""
    return len(getattr(*_blocks(model, family)))


def keep_first_layers(model: nn.Module, family: str, layers: int) -> None:
    """Truncate the body to its first `layers` transformer blocks (1 to block_count: fpt.backbones.load checks)."""
    owner, attr = _blocks(model, family)
    blocks = getattr(owner, attr)
    if not 1 <= layers <= len(blocks):
        raise ValueError(f"keep_first_layers: {layers} of {len(blocks)} blocks")
    setattr(owner, attr, nn.ModuleList(list(blocks)[:layers]))
    for key in ("num_hidden_layers", "n_layer"):
        if hasattr(model.config, key):
            setattr(model.config, key, layers)
    _cut_per_block_lists(model.config, layers)


def _cut_per_block_lists(config, layers: int) -> None:
    """A config's per-block lists must match the block count: transformers checks them when the
    saved config is built again (`fpt export` then from_pretrained), and refused a cut GPT-Neo."""
    for key in ("layer_types", "attention_layers"):  # many newer families; GPT-Neo
        value = getattr(config, key, None)
        if isinstance(value, list) and len(value) > layers:
            setattr(config, key, value[:layers])
            if key == "attention_layers" and hasattr(config, "attention_types"):
                config.attention_types = [[value[:layers], 1]]  # GPT-Neo saves the list run-length coded


def position_table(model: nn.Module, family: str) -> nn.Embedding | None:
    """The body's learned position table, or None where the family has none (e.g. RoPE)."""
    path = position_table_path(model, family)
    return None if path is None else model.get_submodule(path)


@torch.no_grad()
def extend_positions(model: nn.Module, family: str, length: int) -> int | None:
    """Grow the learned position table to `length` rows by linear interpolation of the old rows;
    returns the old number of rows, or None where nothing had to grow.

    Interpolating (as ViT does for a new resolution) keeps neighbouring positions similar and
    every position distinct; the table is trained under the fpt policy anyway.
    """
    path = position_table_path(model, family)
    old = None if path is None else model.get_submodule(path)
    if old is None or length <= old.num_embeddings:
        return None
    rows = F.interpolate(old.weight.T[None].float(), size=length, mode="linear", align_corners=True)[0].T
    # _weight: built from the rows, never randomly initialised, so growing draws nothing from the
    # global RNG and the new input and output layers a run seeds next do not depend on it
    new = nn.Embedding(length, old.embedding_dim, _weight=rows.to(old.weight.dtype).contiguous())
    new.weight.requires_grad_(old.weight.requires_grad)
    parent, _, attr = path.rpartition(".")
    owner = model.get_submodule(parent)
    setattr(owner, attr, new)
    # BERT-style embeddings keep index buffers as long as the old table: extend them too.
    for buffer_name, buffer in list(owner.named_buffers(recurse=False)):
        if buffer.shape[-1] == old.num_embeddings and buffer_name in ("position_ids", "token_type_ids"):
            grown = torch.arange(length)[None] if buffer_name == "position_ids" else buffer.new_zeros(1, length)
            owner.register_buffer(buffer_name, grown.to(buffer.dtype), persistent=False)
    for key in ("max_position_embeddings", "n_positions"):
        if hasattr(model.config, key):
            setattr(model.config, key, length)
    return old.num_embeddings


def set_dropout(model: nn.Module, family: str, hidden: float | None, attention: float | None) -> None:
    """Dropout rates of a body: `hidden` for every dropout layer, `attention` on attention
    probabilities (the paper uses 0.1 for both); None leaves that rate as published.

    Attention dropout matters for speed: torch's fused CPU attention kernels have no dropout, so
    with it attention runs a plain path that stores batch x heads x length^2 probabilities (ListOps
    at 2000 tokens: gigabytes per layer, several times slower).
    """
    if hidden is not None:
        for module in model.modules():
            if isinstance(module, nn.Dropout):
                module.p = hidden
    if attention is None:
        return
    # A second pass: in BERT the self-attention module is visited before its child dropout, so
    # setting both in one pass would let the hidden rate overwrite the attention rate.
    sites, config_keys = attention_dropout_sites(family)
    for module in model.modules():
        for site in sites:
            if not type(module).__name__.endswith(site.owner_suffix):
                continue
            value = getattr(module, site.attr, None)
            if site.holds_rate and isinstance(value, float):  # Llama, ViT: a rate read on every call
                setattr(module, site.attr, attention)
            elif not site.holds_rate and isinstance(value, nn.Dropout):
                value.p = attention
    for key in config_keys:
        if hasattr(model.config, key):
            setattr(model.config, key, attention)


def check_attention(attention: str | None) -> str | None:
    """The one lookup of --attention (None: as the backbone was pretrained)."""
    if attention is not None and attention not in ATTENTIONS:
        raise FptError(f"unknown --attention {attention!r}; choose one of {', '.join(ATTENTIONS)}, or leave it unset")
    return attention


def attention_switch(family: str, attention: str | None) -> CausalSwitch | None:
    """What `set_attention` must change to give `family` this attention: None where nothing (None,
    or the family's own direction); refused in one line where fpt cannot (it can make an encoder
    causal, never open up a causal-pretrained body: its weights only ever saw the past)."""
    native = native_attention(family)
    if check_attention(attention) in (None, native):
        return None
    if native is None:
        raise FptError(f"fpt does not know which way backbone family {family!r} attends; leave --attention unset")
    if attention == BIDIRECTIONAL:
        raise FptError(
            f"--attention bidirectional: this {family} backbone was pretrained causal; "
            "leave --attention unset or pick an encoder backbone such as minilm"
        )
    switch = causal_switch(family)
    if switch is None:
        raise FptError(
            f"--attention causal: fpt does not know how to make {family} attention causal; leave --attention unset"
        )
    return switch


def set_attention(model: nn.Module, family: str, attention: str | None) -> None:
    """Make self-attention `attention` ("causal" | "bidirectional"; None: as pretrained). Made
    causal, each position of an encoder sees itself and earlier positions only, as in GPT-2."""
    switch = attention_switch(family, attention)
    if switch is None:
        return
    modules = [m for m in model.modules() if type(m).__name__.endswith(switch.owner_suffix)]
    if not modules:
        raise FptError(
            f"--attention causal: {type(model).__name__} has no {switch.owner_suffix} modules "
            "to make causal; leave --attention unset"
        )
    setattr(model.config, switch.config_key, True)
    for module in modules:
        for attr in switch.attrs:
            if hasattr(module, attr):
                setattr(module, attr, True)


def is_norm(module: nn.Module) -> bool:
    """LayerNorm, RMSNorm and the like, by class name (each family has its own class)."""
    return "norm" in type(module).__name__.lower()


def store_frozen_weights(model: nn.Module, dtype: torch.dtype) -> int:
    """Cast every parameter that is not trained to `dtype`, except normalisation layers' (autocast
    runs those in fp32 and refuses 16-bit parameters; they are tiny); returns the bytes saved.
    Depends on which parameters train, so it is applied once the policy is."""
    saved = 0
    for module in model.modules():
        if is_norm(module):
            continue
        for param in module.parameters(recurse=False):
            if param.requires_grad or not param.is_floating_point() or param.dtype == dtype:
                continue
            saved += param.numel() * (param.element_size() - torch.finfo(dtype).bits // 8)
            param.data = param.data.to(dtype)
    return saved


def enable_checkpointing(model: nn.Module) -> None:
    """Recompute each block in backward (non-reentrant; dropout masks are replayed exactly)."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise FptError(f"{type(model).__name__} does not support activation checkpointing; leave --checkpointing off")
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def is_checkpointing(model: nn.Module) -> bool:
    """Whether `model` recomputes its blocks in backward (`enable_checkpointing`)."""
    on = getattr(model, "is_activation_checkpointing", None)  # transformers >= 5; 4.x has the older name only
    return bool(getattr(model, "is_gradient_checkpointing", False) if on is None else on)


class CompiledBackbone:
    """torch.compile a module in place (names of its parameters unchanged), eager if that fails."""

    def __init__(self, module: nn.Module):
        self.module, self.active = module, True
        self.proven = False
        try:
            module.compile(dynamic=None)
        except Exception as exc:  # pragma: no cover - depends on the torch build
            self._fall_back(exc)

    def _fall_back(self, exc: BaseException) -> None:
        first_line = (str(exc).strip().splitlines() or [""])[0][:120]
        warnings.warn(
            f"torch.compile unavailable here ({type(exc).__name__}: {first_line}); running eager",
            RuntimeWarning,
            stacklevel=3,
        )
        self.module._compiled_call_impl = None
        self.active = False

    def __call__(self, **kwargs):
        if not self.active or self.proven:
            return self.module(**kwargs)
        try:  # the first call compiles: a missing compiler shows up here
            out = self.module(**kwargs)
        except Exception as exc:
            if not _is_compile_failure(exc):
                raise
            self._fall_back(exc)
            return self.module(**kwargs)
        self.proven = True
        return out


def _is_compile_failure(exc: BaseException) -> bool:
    try:
        from torch._dynamo.exc import TorchDynamoException
    except ImportError:  # pragma: no cover
        return False
    return isinstance(exc, TorchDynamoException) or "inductor" in type(exc).__module__
