"""The field's reference methods scored on a finished run's test split, beside fpt's own score:
what a user asks first ("is this any good?"), answered in the same run, on the same split, through
the same metric code. Only at the end: the test split is never touched before (summary["test"]). A task
with no test split at all (an npz without --test-path) is compared on the held-out split it reports.

- A collection of series (fpt.tasks.collections): statsforecast's Naive, SeasonalNaive, Theta and
  AutoETS and M4's Naive2 (fpt.reference.classical), by sMAPE, MASE and OWA.
- The windows of one multivariate series (`ett`, `forecast:FILE.csv`): statsforecast's Naive,
  SeasonalNaive, Theta and AutoETS on each test window's look-back (fpt.reference.windows), by MSE
  and MAE on the scaled values; a model too slow for every window is fitted on every k-th one and
  compared with fpt's score on those same windows.
- A dataset classifier (npz, ucr, images, ListOps): the majority label, a linear probe and, for
  series, MiniRocket (fpt.reference.classification), by accuracy.
- Rows of real-valued targets (the scikit-learn FPTRegressor): the training mean, Ridge and
  gradient-boosted trees (fpt.reference.regression), by R².

`split_baselines` scores the same methods on any split named, for a caller that compares on a
validation split (the scikit-learn estimators, which hold no test split)."""

from __future__ import annotations

import time

from fpt.core.scores import describe, describe_series
from fpt.tasks.base import is_test_split
from fpt.tasks.forecasting import ForecastTask

LOWER_IS_BETTER = ("smape", "mse")
NAMES = {"smape": "sMAPE", "mse": "MSE", "accuracy": "accuracy", "r2": "R²"}


def scored_tests(summary: dict) -> dict[str, dict]:
    """The test splits a finished run scored: those scored at the end, and the split it watched where
    that is a test split (a task without validation: its last evaluation is its test score)."""
    final = summary.get("final") or {}
    watched = {final["split"]: final} if is_test_split(str(final.get("split", ""))) else {}
    return {**watched, **(summary.get("test") or {})}


def _test_split(summary: dict, key: str) -> str | None:
    """The test split the run scored that carries `key` (e.g. "smape", "accuracy")."""
    return next((s for s, result in scored_tests(summary).items() if key in result), None)


def reported_split(task, summary: dict) -> str | None:
    """The split whose score a finished run reports where its task has no test split at all (an npz
    without --test-path: its held-out rows, watched while training); None for any other task."""
    final = summary.get("final") or {}
    return None if getattr(task, "inner", task).test_splits else final.get("split")


def baseline_scores(task, summary: dict, model=None) -> dict | None:
    """{"split", "metric", "seconds", "scores": {method: scores}, "missing": [...]} for the task's test
    split, or None where fpt has no reference for this kind of task or the run scored no test split.
    `model`: the run's, to score fpt on the windows a baseline too slow for all of them was fitted on."""
    task = getattr(task, "inner", task)  # a length-bucketed task: its examples are the inner task's
    if isinstance(task, ForecastTask):
        metric = "mse"
    elif hasattr(task, "series_scores"):
        metric = "smape"
    elif not task.spec.regression and hasattr(task, "train") and hasattr(task.train, "y"):
        metric = "accuracy"
    else:
        return None
    split = _test_split(summary, metric) or reported_split(task, summary)
    return None if split is None else split_baselines(task, split, model)


def split_baselines(task, split: str, model=None) -> dict | None:
    """baseline_scores' record for the methods fitted on the task's training split and scored on `split`
    (whichever split the caller names: the caller answers for never naming a test split before the end),
    or None where fpt has no reference for this kind of task."""
    started = time.perf_counter()
    task = getattr(task, "inner", task)
    if isinstance(task, ForecastTask):
        (scores, missing), metric = _window_scores(task, split, model), "mse"
    elif hasattr(task, "series_scores"):
        from fpt.reference.classical import baseline_forecasts
        from fpt.reference.classical import baseline_scores as score_forecasts

        histories = task.split_histories(split)
        forecasts = baseline_forecasts(task.collection, histories=histories)
        actuals = task.split_actuals(split)
        scores = score_forecasts(task.collection, forecasts, actuals=actuals, histories=histories)
        metric, missing = "smape", []
    elif hasattr(task, "train") and hasattr(task.train, "y"):
        if task.spec.regression:
            from fpt.reference.regression import reference_r2 as reference
        else:
            from fpt.reference.classification import reference_accuracies as reference
        metric = "r2" if task.spec.regression else "accuracy"
        values, missing = reference(task, split)
        scores = {name: {metric: value} for name, value in values.items()}
    else:
        return None
    seconds = round(time.perf_counter() - started, 1)
    # "methods": their order, which summary.json's sorted keys lose (Naive before Theta, not alphabetical)
    return {
        "split": split,
        "metric": metric,
        "seconds": seconds,
        "scores": scores,
        "missing": missing,
        "methods": list(scores),
    }


def _window_scores(task, split: str, model) -> tuple[dict, list[str]]:
    """The baselines on a forecast's windows (fpt.reference.windows), with fpt's score on a subset of
    them, and those left out: all of them without statsforecast (an optional extra that `ett` and
    `forecast:` runs do not otherwise need), named with its install, never a failure of a finished run."""
    from fpt.reference.windows import WINDOW_BASELINES, window_baseline_scores
    from fpt.tasks.forecast_metrics import PIP
    from fpt.training.evaluation import evaluate

    try:
        import statsforecast  # noqa: F401
    except ImportError:
        return {}, [f"{', '.join(WINDOW_BASELINES)}: {PIP}"]

    def fpt_on(limit: int) -> dict:
        return evaluate(model, task, split=split, limit=limit)

    return window_baseline_scores(task, split, fpt_on=None if model is None else fpt_on), []


def _shown(metric: str, scores: dict) -> str:
    if metric == "smape":
        return describe_series(scores)
    if metric == "mse":  # a forecast's windows: a baseline fitted on some of them says which, and fpt's score there
        text = describe(scores)
        if "windows" in scores:
            text += f" (fitted on {scores['windows']} only"
            text += f"; fpt there: {describe(scores['fpt'])})" if "fpt" in scores else ")"
        return text
    if metric == "r2":
        return f"R² {scores['r2']:.2f}"
    return f"accuracy {100 * scores['accuracy']:.1f}%"


def baseline_rows(summary: dict) -> list[tuple[str, str]]:
    """(method, its score as text) for each reference method a run recorded, in their order."""
    beside = summary.get("baselines") or {}
    metric, scores = beside.get("metric", "smape"), beside.get("scores", {})
    order = [name for name in beside.get("methods", []) if name in scores] + sorted(
        set(scores) - set(beside.get("methods", []))
    )
    return [(name, _shown(metric, scores[name])) for name in order]


def verdict(summary: dict) -> str:
    """One plain sentence on whether the best reference method beats fpt on the recorded split (by sMAPE
    for a collection, the competitions' headline; by MSE for a forecast's windows, the long-horizon
    tables'; by accuracy for labels), or ties it (see `compare`)."""
    beside = summary["baselines"]
    if not beside["scores"]:
        return compare(beside, float("nan"))
    final = summary.get("final") or {}
    scored = {final.get("split"): final, **scored_tests(summary)}  # the test splits, or the held-out one reported
    return compare(beside, scored[beside["split"]][beside.get("metric", "smape")])


def compare(beside: dict, whole: float, where: str = "this split") -> str:
    """One plain sentence on whether the best method of a baselines record (`split_baselines`) beats fpt's
    score `whole` on the same split (`where`, as the sentence names it), or ties it. A baseline fitted on
    some windows only is weighed by its score against fpt's on those same windows ("fpt" in its record)."""
    if not beside["scores"]:
        return f"no baseline ran on {where} (left out: {'; '.join(beside.get('missing', []))})"
    metric = beside.get("metric", "smape")
    lower = metric in LOWER_IS_BETTER

    def ours(scores: dict) -> float:
        return scores.get("fpt", {}).get(metric, whole)

    def ratio(item) -> float:  # to fpt's score on the same windows; a plain score where fpt's is 0
        if metric == "r2":  # R² can be 0 or negative: compared as a difference
            return item[1][metric] - ours(item[1])
        return item[1][metric] / ours(item[1]) if ours(item[1]) else item[1][metric]

    best_name, best = (min if lower else max)(beside["scores"].items(), key=ratio)
    mine = ours(best)
    scale, unit = (100, "%") if metric == "accuracy" else (1, "")
    digits = {"accuracy": 2, "mse": 4}.get(metric, 2)
    name, there = NAMES[metric], f" on {best['windows']}" if "fpt" in best else ""

    def shown(value: float) -> str:
        return f"{scale * value:.{digits}f}{unit}"

    if round(best[metric], 6) == round(mine, 6):
        return f"{best_name} scores as fpt does on {where} ({name} {shown(mine)}{there})"
    if (best[metric] < mine) if lower else (best[metric] > mine):
        return f"{best_name} beats fpt on {where} ({name} {shown(best[metric])} against fpt's {shown(mine)}{there})"
    return (
        f"fpt beats every baseline on {where} ({name} {shown(mine)}{there}; the best, {best_name}, "
        f"{shown(best[metric])})"
    )


def comparison_lines(summary: dict) -> list[str]:
    """What `fpt train` prints after its test line: each method's score, those left out, then the verdict."""
    beside = summary.get("baselines")
    if not beside:
        return []
    lines = [f"  {name}: {score}" for name, score in baseline_rows(summary)]
    lines += [f"  (left out: {reason})" for reason in beside.get("missing", [])]
    return [f"baselines on the same {beside['split']} split ({beside['seconds']:.0f} s):", *lines, verdict(summary)]
