"""Performance levers for training on a CPU, each measured in benchmarks/perf.py.

Exact (same numbers as the plain step, kept on or offered freely):
- activation checkpointing: each transformer block is recomputed in the backward pass, so only
  block inputs are kept (memory falls by an order of magnitude; about a third more compute);
- length bucketing: batches of sequences of similar length, so a batch trimmed to its longest
  member carries little padding. Training batches still depend only on (seed, step), and
  `predict` returns every example's prediction in the original order.

Opt-in because they change numerics:
- precision "bf16": frozen weights stored in bfloat16 (half the memory) and the backbone run
  under CPU autocast (bf16 matmuls, fp32 norms, softmax and residual stream); trained weights
  and Adam stay fp32;
- torch.compile of the backbone (falls back to eager where compiling is unavailable).
"""

from __future__ import annotations

import warnings
from typing import Iterator

import torch
from torch import nn

from fpt.errors import FptError
from fpt.tasks.base import Batch, Task

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}


def compute_dtype(precision: str) -> torch.dtype:
    if precision not in PRECISIONS:
        raise FptError(f"unknown --precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if precision == "bf16" and not torch.backends.mkldnn.is_available():
        raise FptError("--precision bf16 needs a torch build with oneDNN; use --precision fp32")
    return PRECISIONS[precision]


def set_threads(threads: int | None) -> None:
    """Intra-op threads for torch (None: torch's default, one per core)."""
    if threads is None:
        return
    if threads < 1:
        raise FptError(f"--threads must be at least 1, got {threads}")
    torch.set_num_threads(threads)


# glibc's malloc raises its mmap threshold (up to 32 MiB) each time a large block is freed, after
# which tensors of ever-changing sizes are carved from the heap and it fragments: ListOps batches
# of varying length grew a process from 2 to 24 GB in minutes. A fixed threshold returns those
# tensors to the system when freed, for about a tenth more time per step.
_M_MMAP_THRESHOLD = -3


def limit_heap_fragmentation(threshold: int = 1 << 20) -> bool:
    """Fix glibc's mmap threshold (for variable-length batches); False where there is no glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "mallopt"):  # musl, macOS, Windows
        return False
    return libc.mallopt(_M_MMAP_THRESHOLD, threshold) == 1


def is_norm(module: nn.Module) -> bool:
    """LayerNorm, RMSNorm and the like, by class name (each family has its own class)."""
    return "norm" in type(module).__name__.lower()


def store_frozen_weights(model: nn.Module, dtype: torch.dtype) -> int:
    """Cast every parameter that is not trained to `dtype`, except normalisation layers' (autocast
    runs those in fp32 and refuses 16-bit parameters; they are tiny); returns the bytes saved."""
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


def enable_checkpointing(backbone: nn.Module) -> None:
    """Recompute each block in backward (non-reentrant; dropout masks are replayed exactly)."""
    if not getattr(backbone, "supports_gradient_checkpointing", False):
        raise FptError(f"{type(backbone).__name__} does not support activation checkpointing; "
                       "leave --checkpointing off")
    kwargs = {"use_reentrant": False}
    if hasattr(backbone, "activation_checkpointing_enable"):  # transformers >= 5 name
        backbone.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


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
        warnings.warn(f"torch.compile unavailable here ({type(exc).__name__}: {first_line}); running eager",
                      RuntimeWarning, stacklevel=3)
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


# --- length bucketing -------------------------------------------------------------------------


class LengthBucketedTask(Task):
    """Wraps a variable-length array task: batches of similar lengths, same examples per window.

    Training: the example stream (a fresh permutation per epoch, as the plain task) is cut into
    windows of `window` batches; inside a window examples are sorted by length, cut into
    batches, and the batches are put in an order seeded by (seed, window). So each window holds
    exactly the examples the plain task would train on in those steps, and the batch of a step
    still depends only on (seed, step). Evaluation visits the split sorted by length; use
    `predict` for per-example results in the original order.
    """

    def __init__(self, task: Task, window: int = 32):
        if window < 1:
            raise FptError(f"--bucket-window must be at least 1, got {window}")
        train = getattr(task, "train", None)
        if train is None or getattr(train, "lengths", None) is None:
            raise FptError(f"task {task.name!r} has sequences of one length; length bucketing needs a "
                           "variable-length task (e.g. listops), leave --bucket-window out")
        self.inner, self.window = task, window
        self.name, self.spec, self.eval_split = task.name, task.spec, task.eval_split
        self.notes = getattr(task, "notes", {})
        self._cache: tuple[tuple[int, int, int], list[torch.Tensor]] | None = None

    @property
    def eval_splits(self) -> tuple[str, ...]:
        return self.inner.eval_splits

    def _stream(self, start: int, count: int, seed: int) -> torch.Tensor:
        """Indices of stream positions [start, start + count): the plain task's training order."""
        n, parts = len(self.inner.train), []
        while count > 0:
            epoch, offset = divmod(start, n)
            take = self.inner._permutation(seed, epoch)[offset: offset + count]
            parts.append(take)
            start, count = start + len(take), count - len(take)
        return torch.cat(parts)

    def _window_batches(self, window: int, batch_size: int, seed: int) -> list[torch.Tensor]:
        key = (window, batch_size, seed)
        if self._cache is None or self._cache[0] != key:
            index = self._stream(window * self.window * batch_size, self.window * batch_size, seed)
            lengths = self.inner.train.lengths[index]
            index = index[torch.sort(lengths, stable=True).indices]
            batches = list(index.split(batch_size))
            gen = torch.Generator().manual_seed((seed * 15_485_863 + window * 32_452_843) % (2**63))
            order = torch.randperm(len(batches), generator=gen).tolist()
            self._cache = (key, [batches[i] for i in order])
        return self._cache[1]

    def train_batch(self, step: int, batch_size: int, seed: int) -> Batch:
        from fpt.tasks.base import step_generator

        window, position = divmod(step, self.window)
        index = self._window_batches(window, batch_size, seed)[position]
        return self.inner._batch(self.inner.train, index, step_generator(seed, step))

    def eval_order(self, split: str | None = None) -> torch.Tensor:
        name = split or self.eval_split
        if name not in self.inner.evals:
            raise FptError(f"task {self.name!r} has no split {name!r}; it has {', '.join(self.inner.evals)}")
        return torch.sort(self.inner.evals[name].lengths, stable=True).indices

    def indexed_eval_batches(self, batch_size: int, split: str | None = None) -> Iterator[tuple[torch.Tensor, Batch]]:
        """(original indices, batch) over the split, shortest sequences first."""
        data = self.inner.evals[split or self.eval_split]
        for index in self.eval_order(split).split(batch_size):
            yield index, self.inner._batch(data, index, None)

    def eval_batches(self, batch_size: int, split: str | None = None) -> Iterator[Batch]:
        for _, batch in self.indexed_eval_batches(batch_size, split):
            yield batch


@torch.inference_mode()
def predict(model: nn.Module, task: Task, batch_size: int = 256, split: str | None = None) -> torch.Tensor:
    """Logits (N, num_outputs, num_classes) for every example of a split, in the split's order."""
    was_training = model.training
    model.eval()
    try:
        if isinstance(task, LengthBucketedTask):
            pieces = [(index, model(batch.x, batch.mask)) for index, batch in task.indexed_eval_batches(batch_size, split)]
            total = sum(len(index) for index, _ in pieces)
            out = torch.empty(total, *pieces[0][1].shape[1:], dtype=pieces[0][1].dtype)
            for index, logits in pieces:
                out[index] = logits
            return out
        return torch.cat([model(batch.x, batch.mask) for batch in task.eval_batches(batch_size, split)])
    finally:
        model.train(was_training)
