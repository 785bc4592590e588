"""The field's reference methods scored on a finished run's test split, beside fpt's own score:
what a user asks first ("is this any good?"), answered in the same run, on the same split, through
the same metric code. Only at the end: the test split is never touched before (summary["test"]).

- A collection of series (fpt.tasks.collections): statsforecast's Naive, SeasonalNaive, Theta and
  AutoETS and M4's Naive2 (fpt.reference.forecasting), by sMAPE, MASE and OWA.
- A dataset classifier (npz, ucr, images, ListOps): the majority label, a linear probe and, for
  series, MiniRocket (fpt.reference.classification), by accuracy."""

from __future__ import annotations

import time

from fpt.core.scores import describe_series
from fpt.tasks.base import is_test_split


def scored_tests(summary: dict) -> dict[str, dict]:
    """The test splits a finished run scored: those scored at the end, and the split it watched where
    that is a test split (a task without validation: its last evaluation is its test score)."""
    final = summary.get("final") or {}
    watched = {final["split"]: final} if is_test_split(str(final.get("split", ""))) else {}
    return {**watched, **(summary.get("test") or {})}


def _test_split(summary: dict, key: str) -> str | None:
    """The test split the run scored that carries `key` (e.g. "smape", "accuracy")."""
    return next((s for s, result in scored_tests(summary).items() if key in result), None)


def baseline_scores(task, summary: dict) -> dict | None:
    """{"split", "metric", "seconds", "scores": {method: scores}, "missing": [...]} for the task's test
    split, or None where fpt has no reference for this kind of task or the run scored no test split."""
    started = time.perf_counter()
    task = getattr(task, "inner", task)  # a length-bucketed task: its examples are the inner task's
    if hasattr(task, "series_scores"):
        split = _test_split(summary, "smape")
        if split is None:
            return None
        from fpt.reference.forecasting import baseline_forecasts
        from fpt.reference.forecasting import baseline_scores as score_forecasts

        histories = task.split_histories(split)
        forecasts = baseline_forecasts(task.collection, histories=histories)
        actuals = task.split_actuals(split)
        scores = score_forecasts(task.collection, forecasts, actuals=actuals, histories=histories)
        metric, missing = "smape", []
    elif not task.spec.regression and hasattr(task, "train") and hasattr(task.train, "y"):
        split = _test_split(summary, "accuracy")
        if split is None:
            return None
        from fpt.reference.classification import reference_accuracies

        accuracies, missing = reference_accuracies(task, split)
        scores, metric = {name: {"accuracy": value} for name, value in accuracies.items()}, "accuracy"
    else:
        return None
    seconds = round(time.perf_counter() - started, 1)
    return {"split": split, "metric": metric, "seconds": seconds, "scores": scores, "missing": missing}


def _shown(metric: str, scores: dict) -> str:
    return describe_series(scores) if metric == "smape" else f"accuracy {100 * scores['accuracy']:.1f}%"


def baseline_rows(summary: dict) -> list[tuple[str, str]]:
    """(method, its score as text) for each reference method a run recorded, in their order."""
    beside = summary.get("baselines") or {}
    metric = beside.get("metric", "smape")
    return [(name, _shown(metric, scores)) for name, scores in beside.get("scores", {}).items()]


def verdict(summary: dict) -> str:
    """One plain sentence on whether the best reference method beats fpt on the recorded split (by sMAPE
    for series, the competitions' headline; by accuracy for labels), or ties it."""
    beside = summary["baselines"]
    metric = beside.get("metric", "smape")
    ours = scored_tests(summary)[beside["split"]][metric]
    lower = metric == "smape"  # lower is better
    best_name, best = (min if lower else max)(beside["scores"].items(), key=lambda item: item[1][metric])
    scale, unit = (1, "") if lower else (100, "%")
    name = "sMAPE" if lower else "accuracy"
    if round(best[metric], 6) == round(ours, 6):
        return f"{best_name} scores as fpt does on this split ({name} {scale * ours:.2f}{unit})"
    if (best[metric] < ours) if lower else (best[metric] > ours):
        return (
            f"{best_name} beats fpt on this split ({name} {scale * best[metric]:.2f}{unit} "
            f"against fpt's {scale * ours:.2f}{unit})"
        )
    return (
        f"fpt beats every baseline on this split ({name} {scale * ours:.2f}{unit}; the best, {best_name}, "
        f"{scale * best[metric]:.2f}{unit})"
    )


def comparison_lines(summary: dict) -> list[str]:
    """What `fpt train` prints after its test line: each method's score, those left out, then the verdict."""
    beside = summary.get("baselines")
    if not beside:
        return []
    lines = [f"  {name}: {score}" for name, score in baseline_rows(summary)]
    lines += [f"  (left out: {reason})" for reason in beside.get("missing", [])]
    return [f"baselines on the same {beside['split']} split ({beside['seconds']:.0f} s):", *lines, verdict(summary)]
