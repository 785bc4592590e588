"""The paper's two synthetic bit tasks, generated in torch: Bit Memory and Bit XOR.

Training batches are fresh random draws for every step (seeded by (seed, step)). Two fixed
sets are drawn once, each from its own seed, so every run of a task is scored on the same
examples: "heldout", watched while training (the validation set: targets, budgets and recipes
are chosen on it), and "test", scored once when a run ends.
"""

from __future__ import annotations

from typing import Iterator

import torch

from fpt.core.errors import FptError
from fpt.tasks.base import Batch, Task, TaskSpec, check_patch_size, step_generator
from fpt.tasks.registry import register_task

# Fixed: neither set depends on the run's --seed. The held-out seed is the one every earlier run
# was watched on, so those runs' curves are validation curves; the test set was drawn after them.
HELDOUT_SEED = 20210305
TEST_SEED = 20210306
_SPLIT_SEEDS = {"heldout": HELDOUT_SEED, "test": TEST_SEED}


def _check_positive(**values: float) -> None:
    for key, value in values.items():
        if value < 1:
            raise FptError(f"--{key.replace('_', '-')} must be at least 1, got {value}")


def _check_patch(n_bits: int, patch_size: int) -> None:
    check_patch_size(patch_size, n_bits, f"the {n_bits}-bit strings", tile=True)


class _BitTask(Task):
    """Shared machinery: a generator of (x, y), and a held-out and a test set each drawn once."""

    def __init__(self, eval_size: int):
        _check_positive(eval_size=eval_size)
        self.eval_size = eval_size
        self._drawn: dict[str, Batch] = {}

    @property
    def eval_splits(self) -> tuple[str, ...]:
        return tuple(_SPLIT_SEEDS)

    def _generate(self, n: int, gen: torch.Generator) -> Batch:
        raise NotImplementedError

    def train_batch(self, step: int, batch_size: int, seed: int) -> Batch:
        return self._generate(batch_size, step_generator(seed, step))

    def eval_batches(self, batch_size: int, split: str | None = None) -> Iterator[Batch]:
        split = split or self.eval_split
        if split not in _SPLIT_SEEDS:
            raise FptError(f"task {self.name!r} has the splits {', '.join(_SPLIT_SEEDS)}, not {split!r}")
        if split not in self._drawn:
            self._drawn[split] = self._generate(self.eval_size, torch.Generator().manual_seed(_SPLIT_SEEDS[split]))
        for start in range(0, self.eval_size, batch_size):
            yield self._drawn[split].slice(start, start + batch_size)


@register_task("bit-memory")
class BitMemory(_BitTask):
    """n_strings random +-1 strings, then one of them with each bit zeroed with prob mask_prob.

    Target: the unmasked string. Patches of patch_size values are tokens; each of the last
    n_bits / patch_size tokens predicts the patch_size bits of its patch.
    """

    name = "bit-memory"

    def __init__(
        self, n_bits: int = 1000, n_strings: int = 5, patch_size: int = 50, mask_prob: float = 0.5, eval_size: int = 500
    ):
        super().__init__(eval_size)
        _check_positive(n_bits=n_bits, n_strings=n_strings)
        _check_patch(n_bits, patch_size)
        if not 0.0 <= mask_prob < 1.0:
            raise FptError(f"--mask-prob must be in [0, 1), got {mask_prob}")
        self.n_bits, self.n_strings, self.patch_size, self.mask_prob = n_bits, n_strings, patch_size, mask_prob
        tokens_per_string = n_bits // patch_size
        self.spec = TaskSpec(
            seq_len=(n_strings + 1) * tokens_per_string,
            num_classes=2,
            input_dim=patch_size,
            last_k=tokens_per_string,
            outputs_per_token=patch_size,
        )

    def _generate(self, n: int, gen: torch.Generator) -> Batch:
        strings = torch.randint(0, 2, (n, self.n_strings, self.n_bits), generator=gen).float() * 2 - 1
        chosen = torch.randint(0, self.n_strings, (n,), generator=gen)
        target = strings[torch.arange(n), chosen]
        keep = torch.rand(n, self.n_bits, generator=gen) >= self.mask_prob
        query = target * keep
        x = torch.cat([strings.reshape(n, -1), query], dim=1).reshape(n, -1, self.patch_size)
        return Batch(x=x, y=(target > 0).long())


@register_task("bit-xor")
class BitXor(_BitTask):
    """Two random bit strings of n_bits; the target is their elementwise XOR.

    With patch_size 1 (default) each bit is a token of a 2-entry vocabulary, as in the paper's
    demo; with a larger patch each patch of +-1 values is a continuous token.
    """

    name = "bit-xor"

    def __init__(self, n_bits: int = 5, patch_size: int = 1, eval_size: int = 1000):
        super().__init__(eval_size)
        _check_positive(n_bits=n_bits)
        _check_patch(n_bits, patch_size)
        self.n_bits, self.patch_size = n_bits, patch_size
        tokens_per_string = n_bits // patch_size
        continuous = patch_size > 1
        self.spec = TaskSpec(
            seq_len=2 * tokens_per_string,
            num_classes=2,
            input_dim=patch_size if continuous else None,
            vocab_size=None if continuous else 2,
            last_k=tokens_per_string,
            outputs_per_token=patch_size,
        )

    def _generate(self, n: int, gen: torch.Generator) -> Batch:
        bits = torch.randint(0, 2, (n, 2, self.n_bits), generator=gen)
        y = bits[:, 0] ^ bits[:, 1]
        if self.patch_size == 1:
            x = bits.reshape(n, -1)
        else:
            x = (bits.float() * 2 - 1).reshape(n, -1, self.patch_size)
        return Batch(x=x, y=y)
