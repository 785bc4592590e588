"""TaskSpec: the contract between a task and the model, what a model must know of the task it
serves (input widths or vocabulary, sequence length, classes, what the head reads).

Models (fpt.models) build from a spec; `fpt.tasks.TaskSpec` and `fpt.tasks.base.TaskSpec` are this
class.
"""

from __future__ import annotations

from dataclasses import dataclass

from fpt.core.errors import FptError

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
        """Labels (or values) predicted per example: last_k tokens x outputs_per_token each."""
        return self.last_k * self.outputs_per_token

    @property
    def regression(self) -> bool:
        """True for a task that predicts real values (target "values", e.g. a forecast), not classes."""
        return self.target == "values"
