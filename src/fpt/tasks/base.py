"""What every task provides: the shape of its inputs and outputs, training batches, a held-out split."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterator

import torch

from fpt.core.errors import FptError
from fpt.tasks.spec import TaskSpec  # the contract lives below fpt.tasks; importable here as before


@dataclass
class Batch:
    """x: inputs; y: long labels (B, num_outputs), or float values for a regression task; mask:
    bool (B, L), True on real tokens, or None."""

    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.x.shape[0]

    def to(self, device: torch.device) -> "Batch":
        """The batch on `device` (drawn on the CPU, so a seed gives the same data on every device)."""
        if self.x.device == device:
            return self
        mask = None if self.mask is None else self.mask.to(device)
        return Batch(self.x.to(device), self.y.to(device), mask)

    def slice(self, start: int, stop: int) -> "Batch":
        """Examples [start, stop) of the batch (their mask too), as a new Batch sharing storage."""
        mask = None if self.mask is None else self.mask[start:stop]
        return Batch(self.x[start:stop], self.y[start:stop], mask)


def series_tokens(lookback: int, patch_size: int, stride: int) -> int:
    """Patches a window of `lookback` steps makes: every full patch `stride` apart, and one more over
    the window's end padded with its last value (One Fits All's and PatchTST's patching)."""
    return (lookback - patch_size) // stride + 2


def step_generator(seed: int, step: int) -> torch.Generator:
    """A generator for one training step: batches depend on (seed, step) only, so resume is exact."""
    return torch.Generator().manual_seed((seed * 1_000_003 + step) % (2**63))


def training_share(fraction: float, total: int, what: str) -> int:
    """How many of `total` training `what` --train-fraction keeps: floor(fraction x total), the
    fraction read as the decimal it was written as (0.29 of 100 is 29, not the 28 that binary
    floating point would give); a share that keeps none is refused."""
    kept = math.floor(Fraction(repr(float(fraction))) * total)
    if kept < 1:
        raise FptError(
            f"--train-fraction {fraction} keeps none of the {total:,} training {what}; use at least {1 / total:.3g}"
        )
    return kept


def check_patch_size(patch_size: int, length: int, what: str, tile: bool = False) -> None:
    """--patch-size of any task (the one place it is checked): 1 to `length`, the steps of `what` it cuts, and
    where patches must tile `what` exactly (bits, images), a divisor of `length`."""
    if not 1 <= patch_size <= length:
        raise FptError(f"--patch-size must be 1 to {length} ({what}), got {patch_size}")
    if tile and length % patch_size:
        raise FptError(f"--patch-size {patch_size} does not divide {what}; pick a divisor of {length}")


def check_protocol(protocol: str, protocols: tuple[str, ...], task: str) -> None:
    """--protocol of a task that offers several (cifar10-lra, listops): one of its `protocols`."""
    if protocol not in protocols:
        raise FptError(f"unknown --protocol {protocol!r} for {task}; choose {' or '.join(protocols)}")


def check_train_fraction(fraction: float | None) -> None:
    """--train-fraction unset or a fraction in (0, 1] (checked before a task is built; training_share and
    Task.keep_training_share check it against the task)."""
    if fraction is not None and not 0 < fraction <= 1:
        raise FptError(f"--train-fraction is a fraction in (0, 1], got {fraction}")


def training_examples(task: "Task") -> int | None:
    """The examples a task trains on, or None where it draws fresh ones every step (bits, ListOps' generator)."""
    inner = getattr(task, "inner", task)  # a length-bucketed task: its examples are the inner task's
    train = getattr(inner, "train", None)
    return len(train) if train is not None else getattr(inner, "notes", {}).get("examples", {}).get("train")


def is_test_split(name: str) -> bool:
    """A test split: "test", or a test holdout such as homology's "test_fold_holdout"."""
    return name == "test" or name.startswith("test_")


class Task(ABC):
    """A source of training batches and a fixed held-out split."""

    name: str
    spec: TaskSpec
    eval_split: str = "heldout"

    @abstractmethod
    def train_batch(self, step: int, batch_size: int, seed: int) -> Batch:
        """The training batch of `step`; the same arguments always give the same batch."""

    @property
    def variable_length(self) -> bool:
        """True where batches vary in length (padded and masked): bucketing applies."""
        return False

    @property
    def eval_splits(self) -> tuple[str, ...]:
        """Every split `fpt evaluate` reports; training evaluates `eval_split`."""
        return (self.eval_split,)

    @property
    def test_splits(self) -> tuple[str, ...]:
        """The splits tables report: "test" and any test holdouts (none for generated tasks)."""
        return tuple(s for s in self.eval_splits if is_test_split(s))

    # why a task offers no --train-fraction, where it does not override keep_training_share
    share_refused = "draws fresh training examples every step, so it has no training split to take a share of"

    def keep_training_share(self, fraction: float) -> None:
        """Train on the first `fraction` of the training split, in its stored order (few-shot);
        the evaluation splits stay whole. A task that draws fresh examples every step has no split."""
        raise FptError(f"--train-fraction: task {self.name!r} {self.share_refused}; leave --train-fraction unset")

    @abstractmethod
    def eval_batches(self, batch_size: int, split: str | None = None) -> Iterator[Batch]:
        """A whole evaluation split (default `eval_split`), in order, in batches of at most batch_size."""
