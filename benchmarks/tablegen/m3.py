"""The M3 table (issue 60): the frozen MiniLM, its budget chosen on validation, beside statsforecast's
baselines and M4's Naive2 scored by the same metric code on the same split, and the published Theta.
Reads the runs benchmarks/m3_fpt.py trains (results/m3/SUBSET/fastSTEPS-seedK) and the figures
benchmarks/m3_baselines.py writes (results/m3_baselines/results.json); and the Tourism tables, from
`fpt reproduce tourism`'s runs (results/tourism/) by fpt's own writer."""

from __future__ import annotations

import re
import statistics

from .common import RESULTS, _json, _markdown

SUBSETS = ("yearly", "quarterly", "monthly", "other")
BASELINES = ("Theta", "AutoETS", "Naive2", "SeasonalNaive", "Naive")


def _chosen_runs(subset: str) -> tuple[int, list[dict]] | None:
    """(steps, the summaries of its seeds) for the budget with the lower seed-0 validation sMAPE."""
    folder = RESULTS / "m3" / subset
    seed0 = {}
    for run in sorted(folder.glob("fast*-seed0")):
        budget = re.fullmatch(r"fast(\d+)-seed0", run.name)  # fpt's own runs, not a control arm's
        if budget and (run / "summary.json").is_file():
            seed0[int(budget.group(1))] = _json(run / "summary.json")["final"]["smape"]
    if not seed0:
        return None
    steps = min(seed0, key=seed0.get)
    runs = sorted(run for run in folder.glob(f"fast{steps}-seed*") if re.fullmatch(rf"fast{steps}-seed\d+", run.name))
    return steps, [_json(run / "summary.json") for run in runs if (run / "summary.json").is_file()]


def _mean_std(values: list[float], places: int) -> str:
    if len(values) == 1:
        return f"{values[0]:.{places}f} (n=1)"
    return f"{statistics.mean(values):.{places}f} ± {statistics.stdev(values):.{places}f} (n={len(values)})"


def _forecast_values(baselines: dict) -> dict[str, int]:
    """Each subset's forecast values (series x horizon): what an "all" column weighs a subset by, every forecast
    value alike, as the published all-series figure averages (baselines: results/m3_baselines/results.json)."""
    return {s: baselines["subsets"][s]["series"] * baselines["subsets"][s]["horizon"] for s in SUBSETS}


def _over_all(values: dict[str, float], weights: dict[str, int]) -> float:
    """One seed's subset scores averaged over every forecast value of M3 (weights: _forecast_values)."""
    return sum(weights[s] * values[s] for s in SUBSETS) / sum(weights.values())


def m3_table() -> str:
    """sMAPE (and OWA) per subset and over all 3,003 series, test split, every row on the same split."""
    baselines = _json(RESULTS / "m3_baselines" / "results.json")
    header = ["method", *(f"{s} ({baselines['subsets'][s]['series']})" for s in SUBSETS), "all (3003), sMAPE"]
    chosen = {s: _chosen_runs(s) for s in SUBSETS}
    rows = []
    if all(chosen.values()):
        seeds = min(len(runs) for _, runs in chosen.values())
        cells, overall = [], []
        for subset in SUBSETS:
            steps, runs = chosen[subset]
            smapes = [run["test"]["test"]["smape"] for run in runs]
            owas = [run["test"]["test"]["owa"] for run in runs]
            cells.append(f"{_mean_std(smapes, 2)} / {statistics.mean(owas):.3f}, {steps} steps")
        weights = _forecast_values(baselines)
        for k in range(seeds):  # all: each seed's subsets weighted by their forecast values
            overall.append(_over_all({s: chosen[s][1][k]["test"]["test"]["smape"] for s in SUBSETS}, weights))
        rows.append(["fpt: frozen MiniLM, fast recipe, budget chosen on val", *cells, _mean_std(overall, 2)])
    for name in BASELINES:
        scores = [baselines["subsets"][s]["models"][name] for s in SUBSETS]
        cells = [f"{score['smape']:.2f} / {score['owa']:.3f}" for score in scores]
        rows.append(
            [f"{name} (statsforecast)" if name != "Naive2" else "Naive2 (M4's)", *cells, _overall(baselines, name)]
        )
    published = baselines["published_theta_smape"]
    rows.append(
        [
            "Theta, published (Makridakis & Hibon 2000)",
            *(f"{published[s]:.2f}" for s in SUBSETS),
            f"{published['all']:.2f}",
        ]
    )
    return _markdown(header, rows)


def _overall(baselines: dict, name: str) -> str:
    return f"{baselines['overall']['models'][name]['smape_value_weighted']:.2f}"


ARMS = {
    "random": "the same blocks at a random init, frozen (Lu et al.'s Random)",
    "none": "no blocks: input layer, positions, head (Tan et al.'s w/o LLM)",
    "attention": "one fresh self-attention layer, trained (Tan et al.'s LLM2Attn)",
    "block": "one fresh block of the backbone's architecture, trained (Tan et al.'s LLM2Trsf)",
    "full": "every weight trained from a random init, at its own rate chosen on validation (Lu et al.'s Full)",
}


def _full_rate(subset: str, steps: int) -> str | None:
    """The full arm's rate on `subset`: the one whose seed-0 run scored the lower validation sMAPE
    (benchmarks/m3_fpt.py --full-lrs), as it names the runs (fastSTEPS-full-lrRATE-seedK)."""
    val = {}
    for run in (RESULTS / "m3" / subset).glob(f"fast{steps}-full-lr*-seed0"):
        rate = re.fullmatch(rf"fast{steps}-full-lr(.+)-seed0", run.name)
        if rate and (run / "summary.json").is_file():
            val[rate.group(1)] = _json(run / "summary.json")["final"]["smape"]
    return min(val, key=val.get) if val else None


def m3_controls_table() -> str:
    """Test sMAPE of fpt and each control arm at fpt's budget and recipe, mean ± std over the seeds each ran
    (the controls seed for seed with fpt's runs); over all series, each seed's subsets weighted by their
    forecast values, where an arm ran every subset on that seed."""
    weights = _forecast_values(_json(RESULTS / "m3_baselines" / "results.json"))
    chosen = {s: _chosen_runs(s) for s in SUBSETS}
    rows = []
    rates = {s: _full_rate(s, chosen[s][0]) for s in SUBSETS if chosen[s] is not None}
    for arm, what in {"fpt": "frozen pretrained MiniLM (fpt)", **ARMS}.items():
        scores: dict[str, dict[int, float]] = {}  # subset -> seed -> test sMAPE
        for subset in SUBSETS:
            if chosen[subset] is None or (arm == "full" and rates[subset] is None):
                continue
            label = f"full-lr{rates[subset]}" if arm == "full" else arm
            name = f"fast{chosen[subset][0]}-seed" if arm == "fpt" else f"fast{chosen[subset][0]}-{label}-seed"
            for run in (RESULTS / "m3" / subset).glob(f"{name}*"):
                seed = re.fullmatch(rf"{re.escape(name)}(\d+)", run.name)
                if seed and (run / "summary.json").is_file():
                    smape = _json(run / "summary.json")["test"]["test"]["smape"]
                    scores.setdefault(subset, {})[int(seed.group(1))] = smape
        if not scores:
            continue
        if arm == "full":  # each subset's own rate
            what += " (" + ", ".join(f"{s} {rates[s]}" for s in SUBSETS if s in scores) + ")"
        cells = [_mean_std(list(scores[s].values()), 2) if s in scores else "-" for s in SUBSETS]
        seeds = sorted(set.intersection(*(set(scores.get(s, {})) for s in SUBSETS)))
        overall = [_over_all({s: scores[s][k] for s in SUBSETS}, weights) for k in seeds]
        rows.append([arm, what, *cells, _mean_std(overall, 2) if overall else "-"])
    return _markdown(["arm", "what it is", *SUBSETS, "all, sMAPE"], rows)


def m3_intervals_table() -> str:
    """Test coverage of fpt's 80% and 95% intervals (split conformal on the validation horizon) per subset
    and over every forecast value, mean ± std over the seeds (results/m3/intervals.json)."""
    record = _json(RESULTS / "m3" / "intervals.json")["subsets"]
    weights = _forecast_values(_json(RESULTS / "m3_baselines" / "results.json"))
    header = ["nominal", *(f"{s} ({weights[s]:,} values)" for s in SUBSETS), f"all ({sum(weights.values()):,} values)"]
    rows = []
    for level in ("80", "95"):
        per_seed = {s: [100 * c[level] for c in record[s].values()] for s in SUBSETS}
        seeds = min(len(v) for v in per_seed.values())
        overall = [_over_all({s: per_seed[s][k] for s in SUBSETS}, weights) for k in range(seeds)]
        rows.append([f"{level}%", *(_mean_std(per_seed[s], 1) for s in SUBSETS), _mean_std(overall, 1)])
    return _markdown(header, rows)


def tourism_table() -> str:
    """`fpt reproduce tourism`'s tables of the committed runs under results/tourism/, written by fpt's own
    writer (fpt.experiments.competition_tables), as `fpt competitions FOLDER` writes them."""
    from fpt.experiments.competition_tables import competition_tables_text

    return competition_tables_text(RESULTS / "tourism")
