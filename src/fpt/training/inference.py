"""A model's outputs on rows given as the task stores them: the rows checked against the run's task (what
training would refuse, refused in one line), turned into the model's batches, and run through the model
in their order. `fpt predict` (fpt.serve.predict) reads files into such rows; `LoadedRun.predict` takes
them from Python."""

from __future__ import annotations

import numpy as np
import torch

from fpt.core.errors import FptError
from fpt.tasks import Task
from fpt.tasks.arrays import ArrayTask, Split
from fpt.tasks.base import Batch


def unwrapped(task: Task) -> Task:
    """The task whose rows a file holds."""
    return getattr(task, "inner", task)  # a length-bucketed task reads its inner task's rows


FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_float32(array: np.ndarray, name: str, path) -> None:
    """Refuse values the model cannot read: it computes in float32, where NaN stays NaN and anything
    past 3.4e38 (fine as float64) becomes infinite, so its probabilities would be NaN."""
    if not np.issubdtype(array.dtype, np.floating) or array.ndim == 0:
        return
    readable = (np.abs(array) <= FLOAT32_MAX).reshape(len(array), -1).all(1)  # NaN compares false
    if not readable.all():
        raise FptError(
            f"{path}: {name} holds NaN, infinite values or values beyond float32 (|v| > 3.4e38), first in row "
            f"{int(np.flatnonzero(~readable)[0])}; clean the array first"
        )


def check_rows(x: np.ndarray, mask: np.ndarray | None, y: np.ndarray | None, task: Task, path) -> None:
    """Refuse, in one line, rows that do not fit the run's task (what training would refuse too)."""
    task = unwrapped(task)
    if task.spec.regression:
        return _check_windows(x, mask, y, task, path)
    spec = task.spec
    stored = task.train.x if isinstance(task, ArrayTask) else None
    if x.ndim == 0 or len(x) == 0:
        raise FptError(f"{path}: no examples in x (it must hold rows, one per example)")
    if 0 in x.shape[1:]:
        raise FptError(f"{path}: x of shape {x.shape} holds empty rows")
    if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)):
        raise FptError(f"{path}: x must hold numbers, found {x.dtype}")
    check_float32(x, "x", path)
    tokens = spec.input_dim is None  # a generated task of token ids (bit-xor's bits) takes (N, L) rows
    expected_ndim = stored.ndim if stored is not None else 2 if tokens else 3
    images = stored is not None and stored.ndim == 4  # (N, H, W, C): a file may leave out C
    if x.ndim != expected_ndim and not (images and x.ndim == 3):
        raise FptError(f"{path}: x has {x.ndim} axes; this run's {task.name} task reads rows of {expected_ndim - 1}")
    if stored is not None and task.variable_length and stored.ndim == 3 and x.shape[2] != stored.shape[2]:
        raise FptError(f"{path}: tokens of {x.shape[2]} values; this run's {task.name} task reads {stored.shape[2]}")
    if y is not None and not np.issubdtype(np.asarray(y).dtype, np.integer):
        raise FptError(f"{path}: labels y must be integers, found {np.asarray(y).dtype}")
    if mask is not None and mask.shape == x.shape[:2]:
        lengths = mask.astype(bool).sum(1)
        if not (mask.astype(bool) == (np.arange(x.shape[1])[None] < lengths[:, None])).all():
            raise FptError(f"{path}: mask must mark each row's real tokens first, then padding (right-padded rows)")
    if images:  # pixels are stored as uint8: a float or a value past 255 would wrap
        if not np.issubdtype(x.dtype, np.integer) or (x.size and (x.min() < 0 or x.max() > 255)):
            raise FptError(f"{path}: images must be integers 0..255 (uint8) as the {task.name} task stores them")
    if stored is not None and not task.variable_length:
        shape = tuple(stored.shape[1:])
        if tuple(x.shape[1:]) != shape and not (len(shape) == 3 and shape[2] == 1 and tuple(x.shape[1:]) == shape[:2]):
            raise FptError(f"{path}: rows of shape {tuple(x.shape[1:])}, but this run's {task.name} task reads {shape}")
    elif stored is None:
        row = (spec.seq_len,) if tokens else (spec.seq_len, spec.input_dim)
        if x.shape[1:] != row:
            raise FptError(
                f"{path}: x of shape {x.shape}; this run's {task.name} task takes (N, {', '.join(map(str, row))})"
            )
    if x.ndim >= 2 and stored is not None and task.variable_length and x.shape[1] > spec.seq_len:
        raise FptError(f"{path}: sequences of {x.shape[1]} tokens; this run was trained on at most {spec.seq_len}")
    if spec.vocab_size is not None and (task.variable_length or stored is None):
        if not np.issubdtype(x.dtype, np.integer) or (x.size and (x.min() < 0 or x.max() >= spec.vocab_size)):
            found = f"{x.min()}..{x.max()}" if np.issubdtype(x.dtype, np.integer) and x.size else str(x.dtype)
            raise FptError(f"{path}: token ids must be integers in 0..{spec.vocab_size - 1}, found {found}")
    if mask is not None and (mask.shape != x.shape[:2] or not mask.any(1).all()):
        raise FptError(f"{path}: mask must be (N, L) = {x.shape[:2]} with a true token in every row")
    if y is not None:
        expected = (len(x),) if spec.num_outputs == 1 else (len(x), spec.num_outputs)
        if (
            y.shape not in (expected, (len(x), spec.num_outputs))
            or y.min(initial=0) < 0
            or y.max(initial=0) >= spec.num_classes
        ):
            raise FptError(f"{path}: labels y must be {expected} in 0..{spec.num_classes - 1}")


def to_batches(task: Task, x: np.ndarray, mask: np.ndarray | None = None, batch_size: int = 256) -> list[Batch]:
    """Rows in the task's stored form -> model batches, in order (prepared as the task's evaluation
    batches are: images to patches, variable-length rows cut to each batch's longest)."""
    task = unwrapped(task)
    if isinstance(task, ArrayTask) and not task.spec.regression:  # a forecast's windows are model inputs as they are
        stored = task.train.x
        if stored.ndim == 4 and x.ndim == 3:  # images without their channel axis
            x = x[..., None]
        rows = torch.from_numpy(np.ascontiguousarray(x)).to(stored.dtype)
        lengths = None if mask is None else torch.from_numpy(np.asarray(mask, dtype=bool).sum(1))
        if task.variable_length and lengths is None:
            lengths = torch.full((len(rows),), rows.shape[1])
        split = Split(rows, torch.zeros(len(rows), dtype=torch.long), lengths)
        return [
            task.make_batch(split, torch.arange(start, min(start + batch_size, len(rows))), None)
            for start in range(0, len(rows), batch_size)
        ]
    inputs = torch.from_numpy(np.ascontiguousarray(x))
    inputs = inputs.long() if task.spec.input_dim is None else inputs.float()
    return [Batch(inputs[start : start + batch_size], torch.zeros(0)) for start in range(0, len(inputs), batch_size)]


@torch.inference_mode()
def _outputs(model, batches: list[Batch], transform) -> torch.Tensor:
    """transform(the model's float outputs) for every example, in order, on the CPU."""
    was_training = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        outputs = [model(b.x, b.mask).float() for b in (b.to(device) for b in batches)]
    finally:
        model.train(was_training)
    finite = torch.cat([o.isfinite().flatten(1).all(1).cpu() for o in outputs])
    if not finite.all():  # NaN or overflowing weights, or inputs whose float32 arithmetic overflows
        raise FptError(
            f"the model's outputs are NaN or infinite for {int((~finite).sum())} of {len(finite)} examples "
            f"(first: row {int(finite.logical_not().nonzero()[0])}): inputs too large for float32 arithmetic, "
            "or weights that are not finite; nothing written"
        )
    return torch.cat([transform(o).cpu() for o in outputs])


def predict_probabilities(model, batches: list[Batch]) -> torch.Tensor:
    """Class probabilities (N, outputs, classes) for every example, in order."""
    return _outputs(model, batches, lambda logits: torch.softmax(logits, dim=-1))


def predict_values(model, batches: list[Batch]) -> torch.Tensor:
    """A regression model's values (N, outputs) for every example, in order: a forecast's (N, horizon),
    in its windows' units (the model normalises each window and undoes it on its outputs)."""
    return _outputs(model, batches, lambda values: values.flatten(1))


# A folder fpt wrote: a run directory (config.json, metrics.jsonl), a sweep (spec.json), an export
# (config.json, fpt_task.json); and the files fpt keeps there under a name predictions could take
# (every other one ends in a suffix predictions never have: .json, .safetensors, .png, .html).


def _check_windows(x: np.ndarray, mask: np.ndarray | None, y: np.ndarray | None, task: Task, path) -> None:
    """A forecast run's rows: x (N, lookback) and y (N, horizon), finite numbers; no mask."""
    lookback, horizon = task.notes["lookback"], task.notes["horizon"]
    if mask is not None:
        raise FptError(f"{path}: a forecast reads whole windows, with no mask; leave mask out")
    for name, array, width, option in (("x", x, lookback, "--lookback"), ("y", y, horizon, "--horizon")):
        if array is None:
            continue
        if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
            raise FptError(f"{path}: {name} must hold numbers, found {array.dtype}")
        if array.ndim != 2 or array.shape[1] != width or len(array) == 0:
            raise FptError(
                f"{path}: {name} of shape {array.shape}; this run's {task.name} task takes (N, {width}), "
                f"one window of {width} steps ({option}) a row"
            )
        check_float32(array, name, path)
    if y is not None and len(y) != len(x):
        raise FptError(f"{path}: {len(x)} windows in x but {len(y)} targets in y; give one target row a window")
