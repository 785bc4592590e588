"""`fpt reproduce forecasting` and `fpt reproduce uea`: ours beside later papers' figures (issue 31).

Every cell holds our test split, scored once by each run at its end (summary.json "test"): a
forecast's MSE / MAE on the scaled series (lower is better), a classifier's accuracy in percent;
mean ± std over seeds and the number of runs, then the published figure with its source, or words
saying there is none. A forecast table has a column per horizon run and one per task for the
average over horizons 96/192/336/720 (what One Fits All's Table 3 reports), filled only where all
four were run; PatchTST, which we do not run, is a row of its published figures alone.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from fpt.experiments.paper import (
    FORECAST_HORIZONS,
    PUBLISHED_FORECASTS,
    PUBLISHED_ONLY_ROWS,
    PUBLISHED_UEA,
    REPRODUCIBLE,
)
from fpt.experiments.tables import failure_text, scores

NO_FIGURE = "published: —"


def _spread(values: list[float], digits: int) -> str:
    return f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""


def _tasks(table: str, rows: list[dict]) -> list[str]:
    return [t for t in REPRODUCIBLE[table].grid["task"] if any(r["task"] == t for r in rows)]


def _labels(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(str(r["row"]) for r in rows))


def _failure(rows: list[dict]) -> str:
    failed = [r.get("failure") or "" for r in rows if r["status"] in ("failed", "skipped")]
    return failure_text(failed) if failed else "not run"


def forecast_table(rows: list[dict], title: str) -> str:
    """`fpt reproduce forecasting`'s Markdown table: test MSE / MAE per row, task and horizon, plus each task's
    average over horizons 96-720, beside One Fits All's and DLinear's published figures."""
    by_cell: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        by_cell[(str(r["row"]), r["task"], int(r["horizon"]))].append(r)
    tasks = _tasks("forecasting", rows)
    horizons = {t: sorted({int(r["horizon"]) for r in rows if r["task"] == t}) for t in tasks}
    columns = [c for t in tasks for c in [*((t, h) for h in horizons[t]), (t, "avg")]]
    labels = _labels(rows) + PUBLISHED_ONLY_ROWS

    def ours(label: str, task: str, horizon: int) -> tuple[list[float], list[float]] | None:
        done = [r for r in by_cell.get((label, task, horizon), []) if r["status"] == "done"]
        mses = [scores(r, "mse").get("test") for r in done]
        maes = [scores(r, "mae").get("test") for r in done]
        if not done or None in mses or None in maes:
            return None
        return mses, maes

    def cell(label: str, task: str, horizon) -> str:
        published = PUBLISHED_FORECASTS.get((task, horizon), {}).get(label)
        figure = f"published {published[1]:.3f} / {published[2]:.3f} ({published[0]})" if published else NO_FIGURE
        if label in PUBLISHED_ONLY_ROWS:
            return f"not run here; {figure}"
        if horizon == "avg":
            found = {h: ours(label, task, h) for h in FORECAST_HORIZONS}
            if not all(found.values()):
                ran = "/".join(str(h) for h in horizons[task]) or "none"
                return f"needs horizons {'/'.join(map(str, FORECAST_HORIZONS))} (ran {ran}); {figure}"
            mse = statistics.mean(statistics.mean(v[0]) for v in found.values())
            mae = statistics.mean(statistics.mean(v[1]) for v in found.values())
            n = min(len(v[0]) for v in found.values())
            return f"{mse:.3f} / {mae:.3f} (n={n} per horizon); {figure}"
        found = ours(label, task, horizon)
        if found is None:
            runs = by_cell.get((label, task, horizon), [])
            text = "no test score" if any(r["status"] == "done" for r in runs) else _failure(runs)
            return f"{text}; {figure}"
        mses, maes = found
        return f"{statistics.mean(mses):.3f}{_spread(mses, 3)} / {statistics.mean(maes):.3f} (n={len(mses)}); {figure}"

    heading = [f"{t.partition(':')[2] or t}, {'avg' if h == 'avg' else f'H={h}'}" for t, h in columns]
    lines = [
        f"### {title}: test MSE / MAE (lower is better), each run's test split scored once at its end",
        "",
        "| | " + " | ".join(heading) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for label in labels:
        lines.append(f"| {label} | " + " | ".join(cell(label, t, h) for t, h in columns) + " |")
    lines += [
        "",
        "fpt: the frozen backbone; random: the same, randomly initialised; linear: DLinear (`--model linear`). "
        "Published: One Fits All (Zhou et al., NeurIPS 2023), Table 3, the average over horizons 96/192/336/720 "
        "(its GPT2(6) beside our fpt row, its DLinear beside our linear row); ETTh1 per horizon: the DLinear "
        'paper (Zeng et al. 2023, look-back 336). "published: —": no published figure quoted here.',
    ]
    return "\n".join(lines) + "\n"


def uea_table(rows: list[dict], title: str, options: dict) -> str:
    """`fpt reproduce uea`'s Markdown table: test accuracy in percent per row and UEA task, beside One Fits
    All's published GPT2(6) figures; `options` (the sweep's task options) gives the --val-size stated below."""
    tasks = _tasks("uea", rows)
    labels = _labels(rows)

    def cell(label: str, task: str) -> str:
        published = PUBLISHED_UEA.get(task, {}).get(label)
        figure = f"published {published[1]:g} ({published[0]})" if published else NO_FIGURE
        runs = [r for r in rows if str(r["row"]) == label and r["task"] == task]
        values = [scores(r).get("test") for r in runs if r["status"] == "done"]
        if not values:
            return f"{_failure(runs)}; {figure}"
        if None in values:
            return f"no test score; {figure}"
        values = [100 * v for v in values]
        return f"{statistics.mean(values):.1f}{_spread(values, 1)} (n={len(values)}); {figure}"

    val_sizes = ", ".join(
        f"{t.partition(':')[2]} {options.get('val_size', REPRODUCIBLE['uea'].task_options[t]['val_size'])}"
        for t in tasks
    )
    lines = [
        f"### {title}: test accuracy in %, each run's test split scored once at its end",
        "",
        "| | " + " | ".join(t.partition(":")[2] for t in tasks) + " |",
        "|---" * (len(tasks) + 1) + "|",
    ]
    for label in labels:
        lines.append(f"| {label} | " + " | ".join(cell(label, t) for t in tasks) + " |")
    lines += [
        "",
        f"Validation (the split watched while training): training series held out, --val-size: {val_sizes}. "
        "Published: One Fits All (Zhou et al., NeurIPS 2023), Table 25, GPT2(6), beside our fpt row: the best of "
        "27 evaluations on the test split, which its script watches as validation, so not a test score like ours; "
        '"published: —": no published figure quoted here.',
    ]
    return "\n".join(lines) + "\n"


def published_table(table: str, rows: list[dict], title: str, options: dict) -> str:
    """A time-series table's text (rows: `table_rows`, each labelled with its row)."""
    return forecast_table(rows, title) if table == "forecasting" else uea_table(rows, title, options)
