"""The rows FPTClassifier and FPTRegressor hold out of training, and the field's simple baselines scored
on them beside fpt (issue 57): what answers "is this any good?" in the same fit. The baselines are
fpt.training.reference_scores.split_baselines, the code `fpt train` runs on its test split, here
fitted on the estimator's training rows and scored on its validation rows; the estimator never holds a
test split, so none is touched."""

from __future__ import annotations

import logging
import sys

import numpy as np
import torch

from fpt.tasks.arrays import Split

# Held out by default: 0.2, not scikit-learn's usual 0.1 (MLPClassifier, HistGradientBoosting), because
# these estimators meet small tables: load_wine's 142 training rows give 28 validation rows at 0.2
# (a row is 3.6 points of accuracy), 14 at 0.1 (7 points), too coarse to compare methods on.
VALIDATION_FRACTION = 0.2
LOG = logging.getLogger("fpt")


def held_out_rows(
    n: int, fraction: float, seed: int, labels: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(training rows, validation rows), each sorted: `fraction` of the n rows (rounded down) held out,
    seeded, stratified by `labels` (0..k-1) where every class has two rows; none held out where that
    leaves no row on either side."""
    held = int(n * float(fraction))
    if held < 1 or held >= n:
        return np.arange(n), np.arange(0)
    from sklearn.model_selection import train_test_split

    stratify = labels
    if labels is not None and (np.bincount(labels).min() < 2 or held < len(np.unique(labels))):
        stratify = None  # a class of one row, or fewer held-out rows than classes: a plain shuffle
    train, rest = train_test_split(np.arange(n), test_size=held, random_state=int(seed), stratify=stratify)
    return np.sort(train), np.sort(rest)


def evaluation_splits(tokens: torch.Tensor, targets: torch.Tensor, rows: tuple, shown: int) -> tuple[Split, dict, str]:
    """(the training split, the evaluation splits, the one watched) of `held_out_rows`' rows: the held-out
    rows where there are any, else the first `shown` training rows (the Trainer always scores a split)."""
    train_rows, held = rows
    train = Split(tokens[train_rows], targets[train_rows])
    if len(held):
        return train, {"validation": Split(tokens[held], targets[held])}, "validation"
    return train, {"train": Split(train.x[:shown], train.y[:shown])}, "train"


def compare_on_validation(estimator, task, X, y, held: np.ndarray) -> tuple[dict, float | None, str]:
    """({baseline: its score on the validation rows}, fpt's score there by the estimator's own `score`, the
    sentence), the sentence logged (logger "fpt", INFO) and, where the estimator shows progress, printed."""
    from fpt.training.reference_scores import compare, split_baselines

    if not estimator.baselines:
        return {}, None, "baselines left out (baselines=False)"
    if "validation" not in task.evals or (not task.spec.regression and len(np.unique(task.train.y.numpy())) < 2):
        return (
            {},
            None,
            (
                f"no baseline scored: no validation rows to score them on (validation_fraction="
                f"{float(estimator.validation_fraction):g} of {len(X)} rows) or one class among the training rows"
            ),
        )
    beside = split_baselines(task, "validation")
    scores = {name: values[beside["metric"]] for name, values in beside["scores"].items()}
    ours = float(estimator.score(X[held], y[held]))
    sentence = compare(beside, ours, f"the {len(held)} validation rows")
    LOG.info("%s: %s", type(estimator).__name__, sentence)
    if estimator.progress:
        print(sentence, file=sys.stderr, flush=True)
    return scores, ours, sentence
