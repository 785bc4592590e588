"""Classification over in-memory splits: the base of every dataset task.

Rows are stored compactly (uint8 pixels, small-int tokens) and turned into model inputs one
batch at a time (`prepare`), so augmentation is fresh per step and memory stays small.
Variable-length rows carry their lengths; a batch is cut to its own longest row and masked.
Training order is a fresh permutation per epoch, seeded by (seed, epoch), and the batch of a
step depends only on (seed, step): a resumed run sees exactly the batches it would have seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from fpt.core.errors import FptError
from fpt.tasks.base import Batch, Task, TaskSpec, step_generator, training_share


@dataclass
class Split:
    """x: stored rows (N, ...); y: labels (N,); lengths: real tokens per row for padded rows."""

    x: torch.Tensor
    y: torch.Tensor
    lengths: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.y)

    @classmethod
    def from_numpy(cls, x: np.ndarray, y: np.ndarray, mask: np.ndarray | None = None) -> "Split":
        """A split from numpy rows, labels as int64 and, given a mask, each row's length (its count of real tokens)."""
        lengths = None if mask is None else torch.from_numpy(mask.sum(1).astype(np.int64))
        return cls(torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y.astype(np.int64)), lengths)


def check_labels(split: Split, num_classes: int, where: str) -> None:
    """Refuse, in one line naming `where`, labels outside 0..num_classes-1."""
    if len(split) and (split.y.min() < 0 or split.y.max() >= num_classes):
        raise FptError(f"{where}: labels must lie in 0..{num_classes - 1}, found {split.y.min()}..{split.y.max()}")


class ArrayTask(Task):
    """A single-label classification task; subclasses set `spec` and may override `prepare`."""

    def __init__(self, train: Split, evals: dict[str, Split], eval_split: str):
        for split_name, split in {"training": train, **evals}.items():
            if len(split) == 0:  # an empty evaluation split would divide by zero after training
                raise FptError(f"task {self.name!r} has an empty {split_name} split")
        self.train, self.evals, self.eval_split = train, evals, eval_split
        if hasattr(self, "_spec"):
            self._check_row_lengths()
        self._epoch: tuple[int, int, torch.Tensor] | None = None  # (seed, epoch, permutation)

    @property
    def spec(self) -> TaskSpec:
        """The task's TaskSpec; setting it checks every split's rows against its seq_len."""
        return self._spec

    @spec.setter
    def spec(self, spec: TaskSpec) -> None:
        """Set the spec; a split already made is checked against its seq_len at once."""
        self._spec = spec
        if hasattr(self, "train"):  # a task may set its spec before its splits, or after
            self._check_row_lengths()

    def _check_row_lengths(self) -> None:
        """A split whose rows are longer than the model is built for (seq_len) is refused as soon
        as both are known, before anything is built or written."""
        seq_len = self._spec.seq_len
        for split_name, split in {"training": self.train, **self.evals}.items():
            longest = 0 if split.lengths is None or not len(split) else int(split.lengths.max())
            if longest > seq_len:
                raise FptError(
                    f"task {self.name}: its {split_name} split has rows of {longest:,} tokens, longer than the "
                    f"{seq_len:,} the model is built for (npz:PATH: the training file's rows); cut them to {seq_len:,}"
                )

    @property
    def eval_splits(self) -> tuple[str, ...]:
        """The names of the held-out splits, in the order the task made them."""
        return tuple(self.evals)

    def keep_training_share(self, fraction: float) -> None:
        """The first `training_share` of the training examples, in their stored order."""
        total = len(self.train)
        kept = training_share(fraction, total, "examples")
        lengths = self.train.lengths
        self.train = Split(self.train.x[:kept], self.train.y[:kept], None if lengths is None else lengths[:kept])
        self._epoch = None
        self.notes = {
            **getattr(self, "notes", {}),
            "train_fraction": {"fraction": fraction, "kept": kept, "of": total, "unit": "examples"},
        }

    def prepare(self, x: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
        """Stored rows -> model inputs; `gen` is given for training batches (augmentation)."""
        return x.long() if not torch.is_floating_point(x) else x

    def _permutation(self, seed: int, epoch: int) -> torch.Tensor:
        if self._epoch is None or self._epoch[:2] != (seed, epoch):
            gen = torch.Generator().manual_seed((seed * 7_919 + epoch * 104_729) % (2**63))
            self._epoch = (seed, epoch, torch.randperm(len(self.train), generator=gen))
        return self._epoch[2]

    @property
    def variable_length(self) -> bool:
        """True where rows have lengths (padded and masked), so batches are cut to their longest row."""
        return self.train.lengths is not None

    def stream(self, start: int, count: int, seed: int) -> torch.Tensor:
        """Training-set indices at positions [start, start + count) of the example stream: one
        fresh permutation per epoch, seeded by (seed, epoch)."""
        n, parts = len(self.train), []
        while count > 0:
            epoch, offset = divmod(start, n)
            take = self._permutation(seed, epoch)[offset : offset + count]
            parts.append(take)
            start, count = start + len(take), count - len(take)
        return torch.cat(parts)

    def make_batch(self, split: Split, index: torch.Tensor, gen: torch.Generator | None) -> Batch:
        """Rows `index` of `split` as model inputs; variable-length rows cut to their longest and masked."""
        x, mask = split.x[index], None
        if split.lengths is not None:
            lengths = split.lengths[index]
            width = int(lengths.max())
            x = x[:, :width]
            mask = torch.arange(width) < lengths[:, None]
        return Batch(self.prepare(x, gen), split.y[index].unsqueeze(1), mask)

    def train_batch(self, step: int, batch_size: int, seed: int) -> Batch:
        """Batch `step` of the seeded example stream (`stream`); any augmentation is seeded by the step too."""
        index = self.stream(step * batch_size, batch_size, seed)
        return self.make_batch(self.train, index, step_generator(seed, step))

    def eval_split_data(self, split: str | None = None) -> Split:
        """The stored split `split` (default `eval_split`); an unknown name is one line listing the task's splits."""
        name = split or self.eval_split
        if name not in self.evals:
            raise FptError(f"task {self.name!r} has no split {name!r}; it has {', '.join(self.evals)}")
        return self.evals[name]

    def eval_batches(self, batch_size: int, split: str | None = None) -> Iterator[Batch]:
        """The split's rows in stored order, `batch_size` at a time, never augmented."""
        data = self.eval_split_data(split)
        for start in range(0, len(data), batch_size):
            yield self.make_batch(data, torch.arange(start, min(start + batch_size, len(data))), None)


# The validation examples are the same for every run and seed: drawn once with this seed.
VALIDATION_SEED = 20_210_309


def carve_validation(train: Split, test: Split, val_size: int) -> tuple[Split, dict[str, Split], str]:
    """(training, evaluation splits, the split evaluated while training): with `val_size`, that
    many training examples, a fixed random choice, become a 'val' split evaluated while training
    and the rest are trained on; the test split is still there for `fpt evaluate` at the end."""
    if val_size == 0:
        return train, {"test": test}, "test"
    if not 0 < val_size < len(train):
        raise FptError(f"--val-size must be between 1 and {len(train) - 1} (the training examples), got {val_size}")
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(VALIDATION_SEED))
    keep, held = order[val_size:].sort().values, order[:val_size].sort().values

    def rows(index: torch.Tensor) -> Split:
        return Split(train.x[index], train.y[index], None if train.lengths is None else train.lengths[index])

    return rows(keep), {"val": rows(held), "test": test}, "val"
