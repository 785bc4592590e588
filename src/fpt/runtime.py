"""Process-wide settings, made by entry points only (the CLI, `fpt.train`, `fpt.resume`).

Building a model or a task changes nothing outside itself; these calls do, so they are made
once per process by whoever owns the process.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import torch

# glibc's malloc raises its mmap threshold (up to 32 MiB) each time a large block is freed, after
# which tensors of ever-changing sizes are carved from the heap and it fragments: ListOps batches
# of varying length grew a process from 2 to 24 GB in minutes. A fixed threshold returns those
# tensors to the system when freed, for about a tenth more time per step.
_M_MMAP_THRESHOLD = -3


def set_threads(threads: int | None) -> None:
    """Intra-op threads for torch (None: torch's default, one per core). Checked by TrainConfig."""
    if threads is not None:
        torch.set_num_threads(threads)


def limit_heap_fragmentation(threshold: int = 1 << 20) -> bool:
    """Fix glibc's mmap threshold (for variable-length batches); False where there is no glibc."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "mallopt"):  # musl, macOS, Windows
        return False
    return libc.mallopt(_M_MMAP_THRESHOLD, threshold) == 1


def configure_process(threads: int | None, variable_length: bool) -> None:
    """Everything a training or evaluation process sets once, before it builds a model."""
    set_threads(threads)
    # Subnormal floats take a slow path on x86 CPUs: an LSTM baseline on Bit Memory went from
    # 1.9 to over 7 s a step within 150 steps. Flushing them to zero keeps it at 1.9 s.
    torch.set_flush_denormal(True)
    if variable_length:
        limit_heap_fragmentation()
