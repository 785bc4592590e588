"""What a result is scored by: accuracy (higher is better) for a classifier, mean squared error
(lower is better) for a regression task such as a forecast. Everything that ranks, stops on or
prints an evaluation asks here, so the two kinds of task share one trainer, table and report."""

from __future__ import annotations

REGRESSION_METRICS = ("mse", "mae")


def headline_metric(result: dict) -> str:
    """The metric a result is ranked by: "mse" where it has one, else "accuracy"."""
    return "mse" if is_regression(result) else "accuracy"


def is_regression(result: dict) -> bool:
    """A regression result (MSE and MAE) rather than a classifier's (accuracy)."""
    return "mse" in result


def is_subset(record: dict) -> bool:
    """Whether a metrics record scored a subset of its split (--eval-subset: "test[:2000]", or a
    forecast's "val[::10 windows]") rather than the whole split."""
    return "[:" in str(record.get("split", ""))  # "[::" holds "[:" too


def reported(result: dict) -> dict[str, float]:
    """The scores tables, rows and exports carry: {"mse", "mae"} or {"accuracy"}."""
    return {k: result[k] for k in (REGRESSION_METRICS if is_regression(result) else ("accuracy",))}


def metric_label(metric: str) -> str:
    """How a heading names a metric: "accuracy", "MSE", "MAE"."""
    return metric.upper() if metric in REGRESSION_METRICS else metric


def places(metric: str, values: list[float]) -> int:
    """Decimal places a table gives scores that sit side by side: MSE three; accuracy in % one, or two
    where a score below 100 would print as 100.0 at one (a near-perfect arm must not read as perfect)."""
    if metric in REGRESSION_METRICS:
        return 3
    return 2 if any(v < 100 and round(v, 1) >= 100 for v in values) else 1


SERIES_METRICS = ("smape", "mase", "owa")  # a collection of series, in its own units (fpt.tasks.forecast_metrics)


def describe(result: dict) -> str:
    """ "accuracy 0.9876" or "MSE 0.3821, MAE 0.4012", as evaluation lines print a result; a collection
    of series adds its sMAPE, MASE and OWA ("; sMAPE 13.91, MASE 0.873, OWA 0.901")."""
    if is_regression(result):
        text = f"MSE {result['mse']:.4f}, MAE {result['mae']:.4f}"
        if "smape" in result:
            text += f"; {describe_series(result)}"
        return text
    return f"accuracy {result['accuracy']:.4f}"


def describe_series(result: dict) -> str:
    """ "sMAPE 13.91, MASE 0.873, OWA 0.901": a collection's scores in its series' own units."""
    parts = [f"sMAPE {result['smape']:.2f}", f"MASE {result['mase']:.3f}"]
    if result.get("owa") is not None:
        parts.append(f"OWA {result['owa']:.3f}")
    return ", ".join(parts)


def reached(result: dict, target_accuracy: float | None, target_mse: float | None) -> bool:
    """True where a result meets the run's stopping target (at least the accuracy, at most the MSE)."""
    if is_regression(result):
        return target_mse is not None and result["mse"] <= target_mse
    return target_accuracy is not None and result["accuracy"] >= target_accuracy


def better(result: dict, than: dict | None) -> bool:
    """True where `result` beats `than` on the headline metric (a lower MSE, a higher accuracy);
    anything beats None. A tie is not better: the earlier evaluation stays the best."""
    if than is None:
        return True
    metric = headline_metric(result)
    return result[metric] < than[metric] if is_regression(result) else result[metric] > than[metric]
