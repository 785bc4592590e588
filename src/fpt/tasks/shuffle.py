"""A task's evaluation splits with each input's order shuffled (`fpt evaluate RUN --shuffle tokens`):
the drop from the ordered score measures how much a trained model uses the order of its input
(Tan et al., NeurIPS 2024, shuffle forecasting inputs to ask this of LLM-based forecasters).

Each example's real tokens are permuted by a permutation of its own, drawn from (seed, the
example's place in its split), so the result does not depend on how examples are batched; padding
stays where it is and the mask is unchanged. A series task's input is its raw window (a forecast),
which the model cuts into patches itself: there the window's time steps are shuffled, before
patching. Labels and targets are untouched.
"""

from __future__ import annotations

from typing import Iterator

import torch

from fpt.core.errors import FptError
from fpt.tasks.base import Batch, Task, TaskSpec
from fpt.tasks.bucketing import LengthBucketedTask

SHUFFLES = ("tokens",)


def check_shuffle(order: str) -> str:
    """The one lookup of --shuffle."""
    if order not in SHUFFLES:
        raise FptError(f"unknown --shuffle {order!r}; choose {' or '.join(SHUFFLES)}")
    return order


def what_is_shuffled(spec: TaskSpec) -> str:
    """In words, for the report: what the permutation moves."""
    if spec.patch_stride is not None:
        return "the input window's time steps, shuffled before the model cuts them into patches"
    return "each input's tokens (padding left in place)"


def _generator(seed: int, example: int) -> torch.Generator:
    return torch.Generator().manual_seed((seed * 1_000_003 + example) % (2**63))


def shuffle_rows(x: torch.Tensor, mask: torch.Tensor | None, seed: int, first: int = 0) -> torch.Tensor:
    """`x` (B, L, ...) with the real positions of row i permuted by the permutation of example
    `first + i` under `seed`; positions past a row's length (mask False, right padding) stay."""
    out = x.clone()
    for row in range(x.shape[0]):
        length = x.shape[1] if mask is None else int(mask[row].sum())
        order = torch.randperm(length, generator=_generator(seed, first + row))
        out[row, :length] = x[row, order]
    return out


class ShuffledTask(Task):
    """`task`'s evaluation splits, every input shuffled (see the module docstring). Length
    bucketing is undone: examples are scored in split order, each with its own permutation."""

    def __init__(self, task: Task, seed: int = 0):
        inner = task.inner if isinstance(task, LengthBucketedTask) else task
        self.inner, self.seed = inner, seed
        self.name, self.spec, self.eval_split = inner.name, inner.spec, inner.eval_split
        self.notes = getattr(inner, "notes", {})

    @property
    def variable_length(self) -> bool:
        """As the wrapped task."""
        return self.inner.variable_length

    @property
    def eval_splits(self) -> tuple[str, ...]:
        """The wrapped task's splits."""
        return self.inner.eval_splits

    def train_batch(self, step: int, batch_size: int, seed: int) -> Batch:
        """Refused: a shuffled task only scores a trained model."""
        raise FptError("a shuffled task is for evaluation only; train on the task itself")

    def eval_batches(self, batch_size: int, split: str | None = None) -> Iterator[Batch]:
        """The wrapped task's batches in split order, each row's real tokens permuted by a seed and its index in the
        split, so every example's shuffle is the same whatever the batch size."""
        first = 0
        for batch in self.inner.eval_batches(batch_size, split):
            yield Batch(shuffle_rows(batch.x, batch.mask, self.seed, first), batch.y, batch.mask)
            first += len(batch)
