"""`fpt reproduce m3` and `fpt reproduce tourism` (issue 60): fpt and its controls on a forecasting
competition's subsets, beside statsforecast's baselines and the published figures.

Written from the run folders alone (config.json, summary.json): each run's test split, the
competition's own future, scored once at its end in the series' units (summary.json "test": sMAPE,
MASE, OWA against Naive2), and the baselines on that same split, which one run per subset scored
(summary.json "baselines"; fpt.training.reference_scores). One table per metric: a row per arm
(mean ± std over seeds) and per baseline, then the published figures; a column per subset and one
over every series of the competition; then which method wins each column.
`fpt competitions FOLDER [--out FILE]` rebuilds them from committed files.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from fpt.core.errors import FptError
from fpt.experiments.budget_search import BUDGET_PROBES, budget_section, read_choices
from fpt.experiments.controls import ARM_TEXTS, arm_of, find_run_dirs, mean_std, refuse_two_runs_of_a_cell
from fpt.experiments.paper import COMPETITION_SUBSETS, CONTROL_ARMS, PUBLISHED_COMPETITIONS
from fpt.reference.classical import KNOWN
from fpt.training.run_dir import RunDir

METRICS = {"smape": ("sMAPE (%)", 2), "mase": ("MASE", 3), "owa": ("OWA (against Naive2)", 3)}
ALL = "all"  # the column over every series of the competition
NOT_RUN = "not run: no finished run in these files"


@dataclass
class SubsetRun:
    """One finished run of a competition subset, read from its folder."""

    competition: str  # "m3"
    subset: str  # "monthly"
    arm: str
    seed: int
    steps: int
    recipe: str
    backbone: str
    horizon: int
    test: dict  # summary.json's test result: smape, mase, owa, series, mase_left_out, smape_naive2, ...
    baselines: dict | None  # {method: scores} on the same test split, where this run scored them
    path: Path


def read_subset_run(run_dir: Path) -> SubsetRun | None:
    """A finished run of a competition subset (`--task m3:monthly`) by one of the control arms, or None
    (unfinished, another task, another kind of run, or no test split scored)."""
    run = RunDir(run_dir)
    if not run.config_path.is_file():
        return None
    config, summary = run.read_config(), run.read_summary()
    competition, _, subset = str(config.get("task", "")).partition(":")
    arm = arm_of(config)
    test = ((summary or {}).get("test") or {}).get("test")
    if competition not in COMPETITION_SUBSETS or arm is None or not isinstance(test, dict) or "smape" not in test:
        return None
    beside = summary.get("baselines") or {}
    return SubsetRun(
        competition=competition,
        subset=subset,
        arm=arm,
        seed=int(config.get("seed", 0)),
        steps=int(summary["step"]),
        recipe=str(config.get("recipe", "paper")),
        backbone=str(config.get("backbone")),
        horizon=int((summary.get("task_notes") or {}).get("horizon", 1)),
        test=test,
        baselines=beside.get("scores") if beside.get("split") == "test" else None,
        path=Path(run_dir),
    )


def read_subset_runs(root: Path) -> list[SubsetRun]:
    """Every finished competition run under `root`, less the probes a budget was chosen from
    (fpt.experiments.budget_search); two of one subset, arm and seed are refused (one row must not
    average both)."""
    dirs = [p for p in find_run_dirs(root) if BUDGET_PROBES not in p.relative_to(root).parts]
    runs = [r for r in map(read_subset_run, dirs) if r is not None]
    refuse_two_runs_of_a_cell(runs, lambda run: (f"{run.competition}:{run.subset}", run.arm, run.seed))
    return runs


def overall(results: dict[str, dict], horizons: dict[str, int]) -> dict[str, float]:
    """sMAPE, MASE and OWA over every series of the subsets in `results` ({subset: scores}): each
    forecast value counts once (a subset's mean weighted by its series x horizon, as Makridakis &
    Hibon's "all" is; MASE leaves out the series whose in-sample scale is 0, as each subset's does), and
    OWA from those two against Naive2's, weighted alike (M4's definition)."""

    def mean(key: str, scaled: bool = False) -> float:
        left_out = {s: (r.get("mase_left_out") or 0) if scaled else 0 for s, r in results.items()}
        weights = {s: (r["series"] - left_out[s]) * horizons[s] for s, r in results.items()}
        return sum(weights[s] * r[key] for s, r in results.items()) / sum(weights.values())

    smape, mase = mean("smape"), mean("mase", scaled=True)
    found = {"smape": smape, "mase": mase}
    if all("smape_naive2" in r and "mase_naive2" in r for r in results.values()):
        found["owa"] = 0.5 * (smape / mean("smape_naive2") + mase / mean("mase_naive2", scaled=True))
    return found


def _arm_cells(runs: list[SubsetRun], subsets: list[str], metric: str) -> dict[str, tuple[str, float | None]]:
    """Per column, an arm's text (mean ± std (n=K)) and its mean, or why it has none."""
    digits = METRICS[metric][1]
    cells = {}
    for subset in subsets:
        values = [r.test[metric] for r in runs if r.subset == subset and r.test.get(metric) is not None]
        cells[subset] = _spread_cell(values, digits)
    horizons = {r.subset: r.horizon for r in runs}
    by_seed = [
        overall({r.subset: r.test for r in runs if r.seed == seed}, horizons).get(metric)
        for seed in sorted({r.seed for r in runs})
        if {r.subset for r in runs if r.seed == seed} == set(subsets)
    ]
    by_seed = [v for v in by_seed if v is not None]
    cells[ALL] = _spread_cell(by_seed, digits)
    return cells


def _spread_cell(values: list[float], digits: int) -> tuple[str, float | None]:
    """ "mean ± std (n=K)" and the mean; "—" and None for no value."""
    return (f"{mean_std(values, digits)} (n={len(values)})", statistics.mean(values)) if values else ("—", None)


def _baselines(runs: list[SubsetRun], subsets: list[str]) -> tuple[dict[str, dict[str, dict]], dict[str, Path]]:
    """{method: {subset: scores}} from the run of each subset that scored them, and that run's folder."""
    found: dict[str, dict[str, dict]] = {}
    where = {}
    for subset in subsets:
        scored = next((r for r in sorted(runs, key=lambda r: str(r.path)) if r.subset == subset and r.baselines), None)
        if scored is None:
            continue
        where[subset] = scored.path
        for method, scores in scored.baselines.items():
            found.setdefault(method, {})[subset] = scores
    order = {name: k for k, name in enumerate(KNOWN)}  # the baselines' own order, not the file's (alphabetical)
    return dict(sorted(found.items(), key=lambda item: order.get(item[0], len(order)))), where


def competition_markdown(
    competition: str, runs: list[SubsetRun], title: str, skipped: tuple[str, ...] = (), searched: bool = False
) -> str:
    """The competition's tables (one per metric) from its finished runs (`read_subset_run`); `skipped`:
    arms left out for time (--skip-variants), which their rows say; `searched`: each subset's budget was
    chosen on validation (--budget-search), not given."""
    subsets = COMPETITION_SUBSETS[competition]
    runs = [r for r in runs if r.competition == competition]
    if not runs:
        raise FptError(f"no finished {competition} runs found; run `fpt reproduce {competition}` first")
    ran = [s for s in subsets if any(r.subset == s for r in runs)]
    horizons = {r.subset: r.horizon for r in runs}
    baselines, where = _baselines(runs, subsets)
    series = {s: next(r.test["series"] for r in runs if r.subset == s) for s in ran}
    heading = [f"{s} ({series[s]:,} series)" if s in series else s for s in subsets] + [ALL]
    lines = [f"### {title}", "", _setting(competition, runs, ran, searched), ""]
    for metric, (name, digits) in METRICS.items():
        lines += [f"#### {name}, test split, lower is better", "", "| | " + " | ".join(heading) + " |"]
        lines.append("|---" * (len(heading) + 1) + "|")
        means: dict[str, dict[str, float]] = {}  # row -> column -> mean, for the winners
        columns = [*subsets, ALL]
        for arm in CONTROL_ARMS:
            mine = [r for r in runs if r.arm == arm]
            if not mine:
                why = "skipped for time (--skip-variants)" if arm in skipped else NOT_RUN
                lines.append(f"| {arm} | {why}" + " | —" * len(subsets) + " |")
                continue
            cells = _arm_cells(mine, subsets, metric)
            means[arm] = {c: v for c, (_, v) in cells.items() if v is not None}
            lines.append(f"| {arm} | " + " | ".join(cells[c][0] for c in columns) + " |")
        for method, scores in baselines.items():
            values = {s: v[metric] for s, v in scores.items() if v.get(metric) is not None}
            if set(scores) == set(subsets):
                values[ALL] = overall(scores, horizons).get(metric)
            means[method] = {c: v for c, v in values.items() if v is not None}
            lines.append(f"| {method} (baseline) | " + " | ".join(_figure(means[method], c, digits) for c in columns))
            lines[-1] += " |"
        for source, figures in PUBLISHED_COMPETITIONS[competition].get(metric, []):
            lines.append(f"| {source} | " + " | ".join(_figure(figures, c, digits) for c in columns) + " |")
        lines += ["", _winners(means, [*ran, ALL], name, digits), ""]
    lines += _notes(competition, subsets, ran, where)
    return "\n".join(lines) + "\n"


def _figure(values: dict[str, float], column: str, digits: int) -> str:
    return f"{values[column]:.{digits}f}" if column in values else "—"


def _setting(competition: str, runs: list[SubsetRun], ran: list[str], searched: bool) -> str:
    settings = sorted({(r.subset, r.backbone, r.recipe, r.steps) for r in runs}, key=lambda s: ran.index(s[0]))
    text = "; ".join(f"{s}: backbone {b}, recipe {rc}, {n:,} steps" for s, b, rc, n in settings)
    if searched:
        return (
            f"Ran as: {text}. Each subset's budget, the same for every arm and seed, was chosen on validation "
            "(--budget-search, below), as benchmarks/m3_fpt.py chose the committed M3 results'."
        )
    chosen = (
        "benchmarks/m3_fpt.py chose 1,000 steps (yearly, other) or 3,000 (quarterly, monthly) from seed 0's "
        "validation sMAPE"
        if competition == "m3"
        else f"no {competition} budget has been chosen on validation in this repository"
    )
    return (
        f"Ran as: {text}. The budget is --budget for every arm and subset (the same steps), not chosen on "
        f"validation: {chosen}; --budget-search 1000,3000 chooses each subset's that way."
    )


def _winners(means: dict[str, dict[str, float]], columns: list[str], name: str, digits: int) -> str:
    """One sentence: per column, the row with the lowest mean (fpt, a control or a baseline)."""
    parts, wins = [], 0
    for column in columns:
        scored = {row: values[column] for row, values in means.items() if column in values}
        if not scored:
            continue
        best = min(scored, key=scored.get)
        kind = "fpt" if best == "fpt" else "a control" if best in CONTROL_ARMS else "a baseline"
        parts.append(f"{column}: {best} ({kind}, {scored[best]:.{digits}f})")
        wins += best == "fpt"
    return (
        f"Lowest {name} per column among the arms' means and the baselines run here (published figures aside): "
        + "; ".join(parts)
        + f". fpt wins {wins} of {len(parts)} columns."
    )


def _notes(competition: str, subsets: list[str], ran: list[str], where: dict[str, Path]) -> list[str]:
    arms = "; ".join(f"{arm}: {ARM_TEXTS[arm]}" for arm in CONTROL_ARMS)
    missing = [s for s in ran if s not in where]
    scored = ", ".join(f"{s}: {p.name}" for s, p in where.items()) or "none"
    lines = [
        f"Arms ({arms}): mean ± std over seeds of each run's test split, the competition's own future, scored once "
        "at the end in the series' units. Baselines: statsforecast's Naive, SeasonalNaive, Theta and AutoETS and "
        "M4's Naive2 on the same split through the same metric code, scored once per subset, by one run of each "
        f"({scored}).",
        f"{ALL}: every forecast value counts once (each subset's mean weighted by its series x horizon, as "
        "Makridakis & Hibon's published 'all' is; MASE leaves out series with a zero in-sample scale) and OWA "
        f"from those against Naive2's; filled only where all of {', '.join(subsets)} ran (for an arm, per seed).",
    ]
    if missing:
        lines.append(f"No run of {', '.join(missing)} scored the baselines (--set baselines=false, or not finished).")
    if not PUBLISHED_COMPETITIONS[competition]:
        lines.append(f"No published {competition} figure is quoted: none is in this repository or issue 60 to cite.")
    else:
        lines.append(
            "Published figures are the competitions' own on the same test series, by other code "
            "(benchmarks/results/m3_baselines/ says how far statsforecast's Theta lands from the published one)."
        )
    return lines


def competition_tables_text(folder: Path) -> str:
    """`fpt competitions FOLDER`: a competition's tables from its run files (every competition found
    under FOLDER), with how each subset's budget was chosen where FOLDER/budget-probes/ holds the
    probes (--budget-search)."""
    runs = read_subset_runs(folder)
    choices = read_choices(folder)
    found = [c for c in COMPETITION_SUBSETS if any(r.competition == c for r in runs)]
    if not found:
        raise FptError(f"no finished m3 or tourism runs under {folder}")
    return "\n".join(
        competition_markdown(c, runs, c, searched=bool(mine)) + budget_section(mine)
        for c in found
        for mine in [{t: choice for t, choice in choices.items() if t.partition(":")[0] == c}]
    )
