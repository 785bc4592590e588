"""Which device a run computes on: `--device auto|cpu|cuda|cuda:N|mps`. The one place that knows
what devices exist; everything else moves tensors to `model`'s device.

Training batches are always drawn on the CPU from the same seeded generators and then moved, so
the data a seed gives does not depend on the device.
"""

from __future__ import annotations

import contextlib
import functools

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from fpt.core.choices import DEVICE_CHOICES
from fpt.core.errors import FptError


def available_devices() -> list[str]:
    """The devices torch can use here: "cpu", then "cuda:N" for each visible GPU, then "mps" on Apple silicon."""
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    return found


@functools.cache  # asked at every sitting a sweep logs; the machine's GPUs do not change under it
def gpu_names() -> tuple[str, ...]:
    """The name of each visible CUDA GPU ("NVIDIA H100 80GB HBM3"); none on a machine without one."""
    if not torch.cuda.is_available():
        return ()
    return tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))


def check_device_name(name: str) -> None:
    """The spelling of --device, checked without looking at the hardware (configs are checked early)."""
    kind, _, index = name.partition(":")
    if name != "auto" and (
        kind not in ("cpu", "cuda", "mps") or (":" in name and not (kind == "cuda" and index.isdigit()))
    ):
        raise FptError(f"unknown --device {name!r}; choose {DEVICE_CHOICES}")


def resolve_device(name: str = "auto") -> torch.device:
    """The device `name` stands for on this machine (auto: CUDA if there is one, else MPS, else
    the CPU); a device this machine lacks is refused in one line naming those it has."""
    check_device_name(name)
    here = available_devices()
    # "cuda" is the current CUDA device, as in torch: under torchrun, the GPU of this rank's LOCAL_RANK
    current_cuda = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cuda:0"
    if name == "auto":
        return torch.device(current_cuda if torch.cuda.is_available() else next((d for d in here if d != "cpu"), "cpu"))
    wanted = current_cuda if name == "cuda" else name
    if wanted not in here:
        raise FptError(f"--device {name} is not on this machine; it has {', '.join(here)}")
    return torch.device(wanted)


# Up to this many tokens, training in bf16 on a CPU runs attention's plain kernel: there the
# fused kernel's backward is 1.5-3.7x slower (49 tokens: 57.6 against 15.6 ms; 128: 117 against
# 81; 256: fused 2x faster), measured by benchmarks/attention_kernel.py on an Intel Xeon with
# AMX at MiniLM's head shape (12 heads of 32), batch 32, one thread; other head sizes and thread
# counts were not measured. torch picks the fused kernel whenever attention dropout is 0, so
# without this a run with --dropout 0 was a third slower on 49 tokens.
PLAIN_ATTENTION_MAX_TOKENS = 128


def attention_kernel(
    device: torch.device, dtype: torch.dtype, tokens: int, backward: bool
) -> contextlib.AbstractContextManager:
    """Where torch's own choice of attention kernel is slow, the faster one: the plain kernel for
    short bf16 inputs on a CPU when gradients will flow back through attention (`backward`);
    elsewhere torch's choice (the context does nothing). Forward-only passes keep the fused
    kernel, which is faster there at every length."""
    if device.type == "cpu" and dtype == torch.bfloat16 and tokens <= PLAIN_ATTENTION_MAX_TOKENS and backward:
        return sdpa_kernel([SDPBackend.MATH])
    return contextlib.nullcontext()
