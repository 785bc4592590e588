"""What every task provides: the shape of its inputs and outputs, training batches, a held-out split."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterator

import torch

from fpt.errors import FptError

# The most a task (or a saved model's config) may ask the model to build, checked before anything
# is: each new layer is (this) x hidden weights, three times over with Adam's moments, so 10^6
# labels or token ids would need gigabytes. Far above every task fpt knows (remote homology:
# 1,195 classes; LRA's longest rows: 16k tokens) and every published tokenizer (~256k).
MAX_CLASSES = 100_000
MAX_VOCAB = 1 << 18
MAX_SEQ_LEN = 1 << 17
MAX_WIDTH = 1 << 16  # features per token (input_dim), and labels per example (num_outputs)


@dataclass(frozen=True)
class TaskSpec:
    """The input/output contract between a task and the model.

    Inputs are either continuous vectors (x: float (B, L, input_dim)) or discrete tokens
    (x: long (B, L) in [0, vocab_size)). The head reads the last `last_k` tokens (or a pooled
    vector) and predicts `outputs_per_token` labels from each, every label one of `num_classes`:
    logits (B, num_outputs, num_classes) with num_outputs = last_k * outputs_per_token.

    A regression task (`target` "values", e.g. a forecast) predicts num_outputs real numbers
    instead: outputs (B, num_outputs, 1), num_classes 1, scored by squared and absolute error.
    A series task (`patch_stride` set) takes raw windows x: float (B, lookback) and the model cuts
    them into seq_len patches of input_dim steps, `patch_stride` apart (`series_tokens`); with `window_norm` the
    model subtracts each window's mean and divides by its std, and undoes both on its outputs.
    """

    seq_len: int
    num_classes: int
    input_dim: int | None = None
    vocab_size: int | None = None
    last_k: int = 1
    outputs_per_token: int = 1
    target: str = "classes"  # classes | values
    patch_stride: int | None = None
    window_norm: bool = False

    def __post_init__(self):
        too_large = [
            (what, value, limit, fix)
            for what, value, limit, fix in (
                ("classes", self.num_classes, MAX_CLASSES, "number the classes 0..K-1"),
                ("token ids (a vocabulary)", self.vocab_size, MAX_VOCAB, "renumber the tokens used 0..V-1"),
                ("tokens per example", self.seq_len, MAX_SEQ_LEN, "cut the rows shorter"),
                ("features per token", self.input_dim, MAX_WIDTH, "reduce the features"),
                ("labels per example", self.num_outputs, MAX_WIDTH, "predict fewer labels"),
            )
            if isinstance(value, int) and value > limit
        ]
        if too_large:
            what, value, limit, fix = too_large[0]
            raise FptError(
                f"the task asks for {value:,} {what}, more than fpt builds ({limit:,}: the model's new layers "
                f"would need gigabytes); {fix}"
            )

    @property
    def num_outputs(self) -> int:
        return self.last_k * self.outputs_per_token

    @property
    def regression(self) -> bool:
        return self.target == "values"


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

    def keep_training_share(self, fraction: float) -> None:
        """Train on the first `fraction` of the training split, in its stored order (few-shot);
        the evaluation splits stay whole. A task that draws fresh examples every step has no split."""
        raise FptError(
            f"--train-fraction: task {self.name!r} draws fresh training examples every step, so "
            "it has no training split to take a share of; leave --train-fraction unset"
        )

    @abstractmethod
    def eval_batches(self, batch_size: int, split: str | None = None) -> Iterator[Batch]:
        """A whole evaluation split (default `eval_split`), in order, in batches of at most batch_size."""
