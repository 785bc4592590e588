"""The field's reference methods scored on a finished run's test split, beside fpt's own score:
what a user asks first ("is this any good?"), answered in the same run, on the same split, through
the same metric code. Only at the end: the test split is never touched before (summary["test"]).

Today: a collection of series (fpt.tasks.collections) against statsforecast's Naive, SeasonalNaive,
Theta and AutoETS and M4's Naive2 (fpt.reference.forecasting), by sMAPE, MASE and OWA."""

from __future__ import annotations

import time

from fpt.core.scores import describe_series


def baseline_scores(task, summary: dict) -> dict | None:
    """{"split", "seconds", "scores": {method: scores}} for the task's test split, or None where fpt
    has no reference for this kind of task or the run scored no test split."""
    if not hasattr(task, "series_scores"):
        return None
    split = next((s for s in (summary.get("test") or {}) if "smape" in summary["test"][s]), None)
    if split is None:
        return None
    from fpt.reference.forecasting import baseline_forecasts
    from fpt.reference.forecasting import baseline_scores as score_forecasts

    started = time.perf_counter()
    histories = task.split_histories(split)
    forecasts = baseline_forecasts(task.collection, histories=histories)
    scores = score_forecasts(task.collection, forecasts, actuals=task.split_actuals(split), histories=histories)
    return {"split": split, "seconds": round(time.perf_counter() - started, 1), "scores": scores}


def comparison_lines(summary: dict) -> list[str]:
    """What `fpt train` prints after its test line: each method's score, then one plain sentence on
    whether the best of them beats fpt (by sMAPE, the competitions' headline)."""
    beside = summary.get("baselines")
    if not beside:
        return []
    split = beside["split"]
    ours = summary["test"][split]
    lines = [f"  {name}: {describe_series(scores)}" for name, scores in beside["scores"].items()]
    best_name, best = min(beside["scores"].items(), key=lambda item: item[1]["smape"])
    verdict = (
        f"{best_name} beats fpt on this split (sMAPE {best['smape']:.2f} against fpt's {ours['smape']:.2f})"
        if best["smape"] < ours["smape"]
        else f"fpt beats every baseline on this split (sMAPE {ours['smape']:.2f}; the best, {best_name}, "
        f"{best['smape']:.2f})"
    )
    return [f"baselines on the same {split} split ({beside['seconds']:.0f} s):", *lines, verdict]
