"""Frozen linear layers stored in int8: a quarter of fp32's memory for the weights fpt never trains.

`quantize_frozen_linears(body)` replaces every frozen `nn.Linear` (and GPT-2's `Conv1D`) of a body
with an `Int8Linear`: the weight rounded to int8 with one fp32 scale per group of
`group_size` (128) consecutive input weights of each output channel, or per output channel
(group_size None), symmetric (scale = max |w| / 127), the bias kept as a frozen fp32 parameter.
Groups cost 3% more memory than one scale per channel and keep one large weight from coarsening
its whole row: on the packaged MiniLM the body's output error falls from 16% to 6%
(benchmarks/results/int8/accuracy.json). Backward gives the
input its gradient and nothing else: the weight is a constant and never gets one, so no
activation is saved for it either.

Two ways to compute, both from the same int8 storage (measured in benchmarks/int8.py):

- "fp32": the int8 weight is turned back into fp32 (times its scales) for each product, one
  layer at a time, and multiplied in fp32. Always available; outputs differ from fp32 only by the
  weight's rounding.
- "fbgemm": torch's int8 kernels (per-channel scales only) (`torch.ops.quantized.linear_dynamic`): each
  token's activations are quantised on the fly (8 bits with AVX512-VNNI, else 7; scaled per
  token, so one large token does not flatten the others), multiplied in int8, accumulated in int32.
  Backward does the same with the
  output's gradient against the transposed weight, packed once at quantisation. Needs torch's
  fbgemm engine (x86); it holds a second, packed int8 copy of each weight.

The state dict keeps the layer's own names and shapes (`weight`, `bias`): `weight` is written
dequantised in fp32 and re-quantised on load, so a model saved with int8 layers loads into an
fp32 model and back, and the format of saved models does not change. The rounding is
idempotent: re-quantising a dequantised weight gives the same int8 values.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn
from transformers.pytorch_utils import Conv1D

from fpt.core import runtime
from fpt.core.errors import FptError

COMPUTES = ("fp32", "fbgemm")
GROUP_SIZE = 128


def quantize_weight(weight: torch.Tensor, group_size: int | None = GROUP_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 values (out, in), fp32 scales (out, groups)) of an (out, in) weight: one scale per
    `group_size` inputs of a row, or per row where group_size is None or does not divide the row;
    an all-zero group gets scale 1."""
    weight = weight.detach().float()
    rows, columns = weight.shape
    groups = columns // group_size if group_size and columns % group_size == 0 else 1
    grouped = weight.reshape(rows, groups, columns // groups)
    scale = grouped.abs().amax(dim=2) / 127.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    values = torch.round(grouped / scale[:, :, None]).clamp_(-127, 127).to(torch.int8)
    return values.reshape(rows, columns), scale


def fbgemm_available() -> bool:
    """Whether this torch build has the fbgemm quantized engine (x86 CPUs), which compute "fbgemm" needs."""
    return "fbgemm" in torch.backends.quantized.supported_engines


class _FrozenInt8Product(torch.autograd.Function):
    """y = x W^T + b with W constant: backward returns the input's gradient only."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, layer: "Int8Linear") -> torch.Tensor:
        ctx.layer = layer
        return layer.product(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return ctx.layer.input_gradient(grad), None


def _per_token_int8(x: torch.Tensor, packed) -> torch.Tensor:
    """x (rows, in) times a packed int8 weight, each row quantised with its own scale: fbgemm
    quantises one tensor with one scale, so each row is first brought to [-1, 1] and its scale
    put back on the output."""
    row_max = x.abs().amax(dim=1, keepdim=True).clamp_min_(torch.finfo(torch.float32).tiny)
    out = torch.ops.quantized.linear_dynamic(x / row_max, packed, seven_bit_activations())
    return out.mul_(row_max)


def seven_bit_activations() -> bool:
    """Whether fbgemm must quantise activations to 7 bits: its AVX2 kernels sum u8 x s8 pairs in 16 bits, which
    8-bit values can overflow; its AVX512-VNNI kernels accumulate in 32 bits. fbgemm picks its kernels by
    AVX512-VNNI alone (a CPU with AVX-VNNI but no AVX-512 still runs the AVX2 ones; every AMX CPU has it)."""
    flags = runtime.cpu_flags()
    return flags is None or "avx512_vnni" not in flags


class Int8Linear(nn.Module):
    """A frozen linear layer whose weight is int8 with fp32 scales per group of each output channel."""

    def __init__(
        self,
        values: torch.Tensor,
        scale: torch.Tensor,
        bias: torch.Tensor | None,
        compute: str = "fp32",
        conv1d: bool = False,
    ):
        super().__init__()
        check_compute(compute)
        self.out_features, self.in_features = values.shape
        self.compute, self.conv1d = compute, conv1d  # conv1d: the state dict keeps Conv1D's (in, out) layout
        self.register_buffer("weight_int8", values, persistent=False)
        self.register_buffer("weight_scale", scale, persistent=False)  # (out, groups)
        if compute == "fbgemm" and scale.shape[1] != 1:
            raise FptError("int8 compute 'fbgemm' takes one scale per output channel; quantise with group_size=None")
        self.bias = None if bias is None else nn.Parameter(bias.detach().float().clone(), requires_grad=False)
        self._pack()

    @classmethod
    def from_float(cls, layer: nn.Module, compute: str = "fp32", group_size: int | None = GROUP_SIZE) -> "Int8Linear":
        """The int8 copy of a frozen nn.Linear or GPT-2 Conv1D (quantize_weight; the bias kept in fp32). Raises
        FptError for a layer already int8, of another kind, or with a parameter that trains."""
        if isinstance(layer, Int8Linear):
            raise FptError("this layer is already int8; quantise a body once")
        if not isinstance(layer, (nn.Linear, Conv1D)):
            raise FptError(f"cannot quantise a {type(layer).__name__}: only nn.Linear and Conv1D")
        if any(p.requires_grad for p in layer.parameters()):
            raise FptError(
                "int8 storage is for frozen layers only and this one trains; "
                "apply the freeze policy first, or train it in fp32 (--precision fp32)"
            )
        weight = layer.weight.T if isinstance(layer, Conv1D) else layer.weight
        values, scale = quantize_weight(weight, group_size)
        return cls(values, scale, layer.bias, compute, conv1d=isinstance(layer, Conv1D))

    def _pack(self) -> None:
        """fbgemm's packed copies: W for forward, W^T (scale 1: the scales go on the gradient) for backward."""
        self._packed = self._packed_t = None
        if self.compute != "fbgemm":
            return
        values, scale = self.weight_int8.float(), self.weight_scale[:, 0]
        zeros = torch.zeros(self.out_features, dtype=torch.long)
        with warnings.catch_warnings():  # torch 2.13 marks its quantized tensor types deprecated (torchao's now)
            warnings.simplefilter("ignore", UserWarning)
            forward = torch.quantize_per_channel(values * scale[:, None], scale.double(), zeros, 0, torch.qint8)
            backward = torch.quantize_per_tensor(values.T.contiguous(), 1.0, 0, torch.qint8)
        self._packed = torch.ops.quantized.linear_prepack(forward, None)
        self._packed_t = torch.ops.quantized.linear_prepack(backward, None)

    def dequantized(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The (out, in) weight as the layer uses it: int8 values times their group's scale."""
        groups = self.weight_scale.shape[1]
        values = self.weight_int8.to(dtype).reshape(self.out_features, groups, -1)
        return values.mul_(self.weight_scale.to(dtype)[:, :, None]).reshape(self.out_features, self.in_features)

    def product(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., in) -> x W^T + b (..., out), no autograd: fbgemm's int8 kernel for fp32 CPU inputs when the
        compute is "fbgemm", else the dequantised weight in the autocast dtype under autocast, else in x's."""
        if self.compute == "fbgemm" and x.dtype == torch.float32 and x.device.type == "cpu":
            shape = x.shape
            out = _per_token_int8(x.reshape(-1, self.in_features), self._packed)
            out = out.reshape(*shape[:-1], self.out_features)
            return out if self.bias is None else out.add_(self.bias)
        # under autocast (--precision int8-bf16) the product runs in the autocast dtype; the weight is
        # dequantised in fp32 and rounded once to it (a bf16 scale would add its own rounding to every group)
        cpu_or_gpu = x.device.type
        dtype = torch.get_autocast_dtype(cpu_or_gpu) if torch.is_autocast_enabled(cpu_or_gpu) else x.dtype
        bias = None if self.bias is None else self.bias.to(dtype)
        return F.linear(x.to(dtype), self.dequantized().to(dtype), bias)

    def input_gradient(self, grad: torch.Tensor) -> torch.Tensor:
        """The output's gradient (..., out) -> the input's (..., in), grad W: the backward of `product`, by the
        same kernel choice."""
        if self.compute == "fbgemm" and grad.dtype == torch.float32 and grad.device.type == "cpu":
            shape = grad.shape
            scaled = grad.reshape(-1, self.out_features) * self.weight_scale[:, 0]
            return _per_token_int8(scaled, self._packed_t).reshape(*shape[:-1], self.in_features)
        return grad.matmul(self.dequantized().to(grad.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Inputs (..., in_features) -> (..., out_features). Under autograd only the input gets a gradient (the
        weight is constant), and nothing is saved for backward but the layer itself."""
        if torch.is_grad_enabled() and x.requires_grad:
            return _FrozenInt8Product.apply(x, self)
        return self.product(x)

    def _apply(self, fn, recurse=True):  # .to(device): the packed copies are CPU-only, rebuilt here
        result = super()._apply(fn, recurse)
        if self.weight_int8.device.type == "cpu":
            self._pack()
        return result

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        weight = self.dequantized()
        destination[prefix + "weight"] = weight.T.contiguous() if self.conv1d else weight

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected, errors):
        weight = state_dict.pop(prefix + "weight", None)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected, errors)
        if weight is None:
            missing_keys.append(prefix + "weight")
            return
        weight = weight.T if self.conv1d else weight
        if tuple(weight.shape) != (self.out_features, self.in_features):
            errors.append(f"size mismatch for {prefix}weight: {tuple(weight.shape)} in the file")
            return
        groups = self.weight_scale.shape[1]
        values, scale = quantize_weight(weight, self.in_features // groups if groups > 1 else None)
        self.weight_int8.copy_(values)
        self.weight_scale.copy_(scale)
        self._pack()

    def extra_repr(self) -> str:
        """nn.Linear's summary plus the compute, for print(model)."""
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, compute={self.compute}"
        )


def check_compute(compute: str) -> str:
    """Return `compute` if it is one of COMPUTES and runs here; else raise FptError naming the choices, or
    saying that "fbgemm" needs torch's fbgemm engine."""
    if compute not in COMPUTES:
        raise FptError(f"unknown int8 compute {compute!r}; choose one of {', '.join(COMPUTES)}")
    if compute == "fbgemm" and not fbgemm_available():
        raise FptError("int8 compute 'fbgemm' needs torch's fbgemm engine (x86); use compute 'fp32'")
    return compute


def quantize_frozen_linears(body: nn.Module, compute: str = "fp32", group_size: int | None = GROUP_SIZE) -> int:
    """Replace every frozen nn.Linear and Conv1D in `body` by an Int8Linear; returns the bytes saved.

    Apply it once the freeze policy is (it refuses a layer that trains, or a body already quantised);
    trained layers elsewhere in the body are left as they are only if they are not linear: a linear
    layer that trains is an error, not silently skipped, so a policy that trains attention or
    feed-forward layers cannot be combined with int8."""
    check_compute(compute)
    if compute == "fbgemm" and group_size is not None:
        raise FptError("int8 compute 'fbgemm' takes one scale per output channel; quantise with group_size=None")
    if any(isinstance(m, Int8Linear) for m in body.modules()):
        raise FptError("this body is already int8; quantise it once")
    targets = [(name, m) for name, m in body.named_modules() if isinstance(m, (nn.Linear, Conv1D))]
    trained = [name for name, m in targets if any(p.requires_grad for p in m.parameters())]
    if trained:
        shown = ", ".join(trained[:4]) + (" ..." if len(trained) > 4 else "")
        raise FptError(
            f"int8 storage is for frozen layers and {len(trained)} linear layers of this body train ({shown}); "
            "use a policy that freezes attention and feed-forward (fpt), or --precision fp32"
        )
    saved = 0
    for name, layer in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = body.get_submodule(parent_name) if parent_name else body
        quantized = Int8Linear.from_float(layer, compute, group_size)
        saved += layer.weight.numel() * (layer.weight.element_size() - 1) - quantized.weight_scale.numel() * 4
        setattr(parent, attr, quantized)
    return saved
