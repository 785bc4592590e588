"""Length bucketing: batches of sequences of similar length, so a batch trimmed to its longest
member carries little padding (ListOps: 2.40x the examples/s of padding to 2000, benchmarks/perf.py).

Exact: each window of training steps holds exactly the examples the plain task would train on in
those steps, and the batch of a step still depends only on (seed, step).
"""

from __future__ import annotations

from typing import Iterator

import torch

from fpt.core.errors import FptError
from fpt.tasks.arrays import ArrayTask
from fpt.tasks.base import Batch, Task, step_generator


def check_bucket_window(window: int | None) -> None:
    """Refuse, in one line, a --bucket-window below 1 (None: no bucketing)."""
    if window is not None and window < 1:
        raise FptError(f"--bucket-window must be at least 1, got {window}")


class LengthBucketedTask(Task):
    """Wraps a variable-length array task: batches of similar lengths, same examples per window.

    Training: the plain task's example stream (`ArrayTask.stream`) is cut into windows of `window`
    batches; inside a window examples are sorted by length, cut into batches, and the batches are
    put in an order seeded by (seed, window). Evaluation visits the split sorted by length;
    `indexed_eval_batches` gives the original indices, for per-example results in input order.
    """

    def __init__(self, task: Task, window: int = 32):
        check_bucket_window(window)
        if not (isinstance(task, ArrayTask) and task.variable_length):
            raise FptError(
                f"task {task.name!r} has sequences of one length; length bucketing needs a "
                "variable-length task (e.g. listops), leave --bucket-window out"
            )
        self.inner, self.window = task, window
        self.name, self.spec, self.eval_split = task.name, task.spec, task.eval_split
        self.notes = getattr(task, "notes", {})
        self._cache: tuple[tuple[int, int, int], list[torch.Tensor]] | None = None

    @property
    def variable_length(self) -> bool:
        """Always True: only variable-length tasks are bucketed."""
        return True

    @property
    def eval_splits(self) -> tuple[str, ...]:
        """The wrapped task's splits."""
        return self.inner.eval_splits

    def _window_batches(self, window: int, batch_size: int, seed: int) -> list[torch.Tensor]:
        key = (window, batch_size, seed)
        if self._cache is None or self._cache[0] != key:
            index = self.inner.stream(window * self.window * batch_size, self.window * batch_size, seed)
            lengths = self.inner.train.lengths[index]
            index = index[torch.sort(lengths, stable=True).indices]
            batches = list(index.split(batch_size))
            gen = torch.Generator().manual_seed((seed * 15_485_863 + window * 32_452_843) % (2**63))
            order = torch.randperm(len(batches), generator=gen).tolist()
            self._cache = (key, [batches[i] for i in order])
        return self._cache[1]

    def train_batch(self, step: int, batch_size: int, seed: int) -> Batch:
        """Batch `step`: its place in its window's length-sorted, seeded batch order; the same examples per window as
        without bucketing."""
        window, position = divmod(step, self.window)
        index = self._window_batches(window, batch_size, seed)[position]
        return self.inner.make_batch(self.inner.train, index, step_generator(seed, step))

    def eval_order(self, split: str | None = None) -> torch.Tensor:
        """The split's example indices, shortest row first (stable, so ties keep their stored order)."""
        return torch.sort(self.inner.eval_split_data(split).lengths, stable=True).indices

    def indexed_eval_batches(self, batch_size: int, split: str | None = None) -> Iterator[tuple[torch.Tensor, Batch]]:
        """(original indices, batch) over the split, shortest sequences first."""
        data = self.inner.eval_split_data(split)
        for index in self.eval_order(split).split(batch_size):
            yield index, self.inner.make_batch(data, index, None)

    def eval_batches(self, batch_size: int, split: str | None = None) -> Iterator[Batch]:
        """The split's batches shortest first (`indexed_eval_batches` without the indices)."""
        for _, batch in self.indexed_eval_batches(batch_size, split):
            yield batch
