"""Scoring a model: loss and accuracy (or MSE and MAE) on a whole evaluation split, and the
logits of every example of a split, in the split's order; the same on every rank of a
distributed run."""

from __future__ import annotations

from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from fpt.models.ends import TrainableModel
from fpt.tasks import Task
from fpt.tasks.base import Batch
from fpt.tasks.bucketing import LengthBucketedTask
from fpt.training.distributed import SINGLE, World
from fpt.training.stopping import EvaluationInterrupted


def device_of(model) -> torch.device:
    """The device a model's parameters are on (the CPU for a model without parameters): where its batches go."""
    parameter = next(model.parameters(), None)  # None: a model without parameters (NaiveForecast) runs on the CPU
    return torch.device("cpu") if parameter is None else parameter.device


# Tokens in one evaluation batch at most: 256 CIFAR-10 LRA images of 1024 tokens took 6.4 GB in one
# batch; results do not depend on how examples are batched, so long tasks use smaller batches.
EVAL_TOKEN_BUDGET = 32_768


def eval_batch_for(task: Task, batch_size: int) -> int:
    """The evaluation batch size for this task: `batch_size`, less where sequences are long."""
    return max(1, min(batch_size, EVAL_TOKEN_BUDGET // task.spec.seq_len))


def _first_examples(task: Task, batch_size: int, split: str | None, limit: int, cut: list[bool]) -> Iterator[Batch]:
    """The split's first `limit` examples, in batches; appends True to `cut` if the split is longer.
    A length-bucketed task batches its split shortest first: its first examples are picked by
    their place in the split, not by length (the shortest would be the easiest)."""
    if isinstance(task, LengthBucketedTask):
        data = task.inner.eval_split_data(split)
        order = task.eval_order(split)
        cut.extend([len(order) > limit])
        for index in order[order < limit].split(batch_size):
            yield task.inner.make_batch(data, index, None)
        return
    taken = 0
    for batch in task.eval_batches(batch_size, split):
        if taken + len(batch) > limit:
            cut.append(True)
            if taken < limit:
                yield batch.slice(0, limit - taken)
            return
        taken += len(batch)
        yield batch


@torch.inference_mode()
def evaluate(
    model: TrainableModel,
    task: Task,
    batch_size: int = 256,
    split: str | None = None,
    confusion: bool = False,
    world: World = SINGLE,
    limit: int | None = None,
    interrupted: Callable[[], bool] | None = None,
) -> dict:
    """Loss and accuracy on a whole evaluation split (every example, no dropped remainder).

    With confusion=True (single-label tasks) also the confusion matrix (rows: true class) and
    per-class accuracy. Long sequences are evaluated in smaller batches (`eval_batch_for`).
    Ranks of a distributed run score every world.size-th batch each and sum the counts, so the
    split is scored exactly once and every rank gets the same result. `limit`: only the split's
    first N examples (a fixed subset, named "split[:N]" in the result); a task with a
    `subset_index` (a forecast) picks its own, spread over the split. `interrupted`: asked before
    each batch; True stops the evaluation (EvaluationInterrupted), e.g. on Ctrl-C.
    """
    batch_size = eval_batch_for(task, batch_size)
    cut: list[bool] = []  # filled as the batches are drawn: name the split after the loop
    spread = None if limit is None or not hasattr(task, "subset_index") else task.subset_index(split, limit)
    if spread is not None:  # a forecast's subset spans the split (ForecastTask.subset_index)
        data = task.eval_split_data(split)
        batches = (task.make_batch(data, index, None) for index in spread[0].split(batch_size))
    elif limit is None:
        batches = task.eval_batches(batch_size, split)
    else:
        batches = _first_examples(task, batch_size, split, limit, cut)

    if interrupted is not None:
        batches = _until(interrupted, batches)

    def split_name() -> str:
        return (split or task.eval_split) + (spread[1] if spread else f"[:{limit}]" if cut else "")

    if task.spec.regression:
        # a collection of series is also scored in its series' own units (sMAPE, MASE, OWA), on the whole
        # split from one process (the forecasts must be gathered in order: not on a subset, not across ranks)
        whole = limit is None or (hasattr(task, "series_scores") and limit >= len(task.eval_split_data(split)))
        per_series = hasattr(task, "series_scores") and spread is None and whole and not world.distributed
        scores, kept = _evaluate_values(model, batches, world, keep=per_series)
        if per_series:
            scores.update(task.series_scores(split or task.eval_split, torch.cat(kept)))
    else:
        scores = _evaluate_labels(model, batches, world, task.spec.num_classes, confusion)
    return {"split": split_name(), **scores}  # named once the batches are drawn


def _until(interrupted: Callable[[], bool], batches: Iterator[Batch]) -> Iterator[Batch]:
    """The batches, until `interrupted()` says to stop (checked before each)."""
    for batch in batches:
        if interrupted():
            raise EvaluationInterrupted
        yield batch


def _evaluate_labels(model: TrainableModel, batches: Iterator[Batch], world: World, num_classes: int, confusion: bool):
    """A classifier's split: loss, accuracy, exact match and the majority share (and the confusion matrix)."""
    was_training = model.training
    model.eval()
    device = device_of(model)
    matrix = torch.zeros(num_classes, num_classes, dtype=torch.long, device=device)
    label_counts = torch.zeros(num_classes, dtype=torch.long, device=device)
    loss_sum, correct, exact, labels, examples = 0.0, 0, 0, 0, 0
    for index, batch in enumerate(batches):
        if index % world.size != world.rank:
            continue
        batch = batch.to(device)
        logits = model(batch.x, batch.mask)
        loss_sum += F.cross_entropy(logits.reshape(-1, num_classes), batch.y.reshape(-1), reduction="sum").item()
        predicted = logits.argmax(-1)
        hits = predicted == batch.y
        correct += hits.sum().item()
        exact += hits.all(dim=1).sum().item()
        labels += batch.y.numel()
        examples += len(batch)
        label_counts += torch.bincount(batch.y.reshape(-1), minlength=num_classes)
        if confusion:
            matrix += torch.bincount(
                batch.y.reshape(-1) * num_classes + predicted.reshape(-1), minlength=num_classes**2
            ).reshape(num_classes, num_classes)
    model.train(was_training)
    if world.distributed:
        counts = world.all_reduce_sum(
            torch.tensor([loss_sum, correct, exact, labels, examples], dtype=torch.float64, device=device)
        ).tolist()
        loss_sum, (correct, exact, labels, examples) = counts[0], map(round, counts[1:])
        matrix = world.all_reduce_sum(matrix)
        label_counts = world.all_reduce_sum(label_counts)
    # majority_share: the accuracy of always answering the split's most frequent label, the
    # chance level Table 6 tells a flat run from a converged one by (fpt.experiments.convergence)
    result = {
        "loss": loss_sum / labels,
        "accuracy": correct / labels,
        "exact_match": exact / examples,
        "examples": examples,
        "majority_share": label_counts.max().item() / labels,
    }
    if confusion:
        support = matrix.sum(1)
        result["confusion"] = matrix.cpu().tolist()
        result["per_class_accuracy"] = [
            (matrix[c, c] / support[c]).item() if support[c] else None for c in range(num_classes)
        ]
    return result


def _evaluate_values(
    model: TrainableModel, batches: Iterator[Batch], world: World, keep: bool = False
) -> tuple[dict, list[torch.Tensor]]:
    """A regression task's split: mean squared and absolute error over every predicted value of
    every example (a forecast's every step of every window; no batch dropped). The loss is the MSE.
    With `keep`, also the predictions, batch by batch, on the CPU."""
    was_training = model.training
    model.eval()
    device = device_of(model)
    squared, absolute, values, examples = 0.0, 0.0, 0, 0
    kept = []
    for index, batch in enumerate(batches):
        if index % world.size != world.rank:
            continue
        batch = batch.to(device)
        predicted = model(batch.x, batch.mask).reshape(batch.y.shape).double()
        if keep:
            kept.append(predicted.cpu())
        error = predicted - batch.y.double()
        squared += error.square().sum().item()
        absolute += error.abs().sum().item()
        values += batch.y.numel()
        examples += len(batch)
    model.train(was_training)
    if world.distributed:
        totals = world.all_reduce_sum(
            torch.tensor([squared, absolute, values, examples], dtype=torch.float64, device=device)
        ).tolist()
        squared, absolute, values, examples = totals[0], totals[1], round(totals[2]), round(totals[3])
    mse = squared / values
    return {"loss": mse, "mse": mse, "mae": absolute / values, "examples": examples}, kept


@torch.inference_mode()
def predict(model: TrainableModel, task: Task, batch_size: int = 256, split: str | None = None) -> torch.Tensor:
    """Logits (N, num_outputs, num_classes) for every example of a split, in the split's order."""
    was_training = model.training
    model.eval()
    try:
        batch_size = eval_batch_for(task, batch_size)
        device = device_of(model)

        def run(batch: Batch) -> torch.Tensor:
            batch = batch.to(device)
            return model(batch.x, batch.mask).cpu()

        if isinstance(task, LengthBucketedTask):  # batches come sorted by length: put them back in order
            pieces = [(index, run(batch)) for index, batch in task.indexed_eval_batches(batch_size, split)]
            total = sum(len(index) for index, _ in pieces)
            out = torch.empty(total, *pieces[0][1].shape[1:], dtype=pieces[0][1].dtype)
            for index, logits in pieces:
                out[index] = logits
            return out
        return torch.cat([run(batch) for batch in task.eval_batches(batch_size, split)])
    finally:
        model.train(was_training)


@torch.inference_mode()
def forecast_samples(model: TrainableModel, task, split: str, channel: int, count: int = 4) -> dict:
    """`count` windows of one channel spread evenly over a forecasting split (its first and last
    included), with their look-back, true future and forecast (scaled values): what
    `fpt evaluate` draws. `task` is a fpt.tasks.forecasting.ForecastTask."""
    data = task.eval_split_data(split)
    starts = torch.linspace(0, data.windows - 1, count).round().long().unique()
    batch = task.make_batch(data, starts * data.channels + channel, None)
    was_training = model.training
    model.eval()
    try:
        forecast = model(batch.x.to(device_of(model)), None).reshape(batch.y.shape).float().cpu()
    finally:
        model.train(was_training)
    return {"starts": starts.tolist(), "lookback": batch.x, "truth": batch.y, "forecast": forecast}
