"""Time series: ETT forecasts beside the published figures, the UEA classification sets, and fpt beside
MiniRocket on every UCR/UEA set sktime bundles: the `forecasting`, `uea` and `ucr` tables of
benchmarks/forecasting.md. The headline (headline.py) reads the
forecast helpers too."""

from __future__ import annotations

import statistics
from pathlib import Path

from .common import HEADLINE, RESULTS, _json, _jsonl, _markdown, _pct

HORIZONS = (96, 192, 336, 720)
# DLinear's runs per ETT file: ETTh2's recipe was chosen on ETTh2's own validation months
# (forecasting/linear_etth2/selection.md); ETTh1's recipe's ETTh2 runs stay in forecasting/linear/
LINEAR_RUNS = {"ETTh2": "linear_etth2"}


def _linear_pattern(dataset: str) -> str:
    """DLinear's run folders for one ETT file, {h} the horizon (seeds: `-seed*` after it)."""
    return f"forecasting/{LINEAR_RUNS.get(dataset, 'linear')}/{dataset}-h{{h}}"


def _fpt_forecast_pattern(dataset: str) -> str:
    """The headline forecasts' run folders for one ETT file, {h} the horizon (seeds: `-seed*` after it)."""
    return f"headline/{dataset.lower()}-{{h}}-fpt-fast1500"


def _horizon_runs(pattern: str) -> list[list[Path]]:
    """The run folders of each of HORIZONS under a folder pattern with {h}, its seeds `pattern-seed*`."""
    return [sorted(RESULTS.glob(f"{pattern.format(h=h)}-seed*")) for h in HORIZONS]


def _forecast_cell(summaries: list[dict]) -> str:
    """Test MSE / MAE of finished runs (mean, and the spread where there are several seeds)."""
    tests = _tests(summaries)
    if not tests:
        return "-"
    mse, mae = [t["mse"] for t in tests], [t["mae"] for t in tests]
    if len(tests) == 1:
        return f"{mse[0]:.3f} / {mae[0]:.3f}"
    return f"{statistics.mean(mse):.3f} ± {statistics.stdev(mse):.3f} / {statistics.mean(mae):.3f} (n={len(tests)})"


def _finished(runs: list[Path]) -> list[dict]:
    return [_json(run / "summary.json") for run in runs if (run / "summary.json").exists()]


def _average_cell(per_horizon: list[list[dict]]) -> str:
    """The four-horizon average of test MSE / MAE (each horizon's seeds averaged first), or "-"
    until every horizon has a finished run: an average over some horizons is not the published one."""
    if not all(_tests(runs) for runs in per_horizon):
        return "-"
    means = [[statistics.mean(t[key] for t in _tests(runs)) for key in ("mse", "mae")] for runs in per_horizon]
    return f"{statistics.mean(m[0] for m in means):.3f} / {statistics.mean(m[1] for m in means):.3f}"


def _tests(summaries: list[dict]) -> list[dict]:
    return [s["test"]["test"] for s in summaries if s.get("test")]


def _dataset_forecasts(dataset: str) -> str:
    """One ETT file's table: ours and the published figures per horizon and their average."""
    from fpt.experiments.paper import PUBLISHED_FORECASTS

    naive = {
        row["horizon"]: row
        for row in _json(RESULTS / "forecasting" / "naive.json")["rows"]
        if row["dataset"] == dataset
    }
    linear = [_finished(runs) for runs in _horizon_runs(_linear_pattern(dataset))]
    kept_best = [_finished(runs) for runs in _horizon_runs(f"forecasting/linear_best/{dataset}-h{{h}}")]
    fpt_runs = [_finished(runs) for runs in _horizon_runs(_fpt_forecast_pattern(dataset))]

    def published(variant: str) -> list[str]:
        figures = [PUBLISHED_FORECASTS.get((f"ett:{dataset}", key), {}).get(variant) for key in (*HORIZONS, "avg")]
        return ["-" if figure is None else f"{figure[1]:.3f} / {figure[2]:.3f}" for figure in figures]

    naive_cells = [f"{naive[h]['test_mse']:.3f} / {naive[h]['test_mae']:.3f}" for h in HORIZONS]
    naive_average = [statistics.mean(naive[h][f"test_{key}"] for h in HORIZONS) for key in ("mse", "mae")]
    rows = [
        ["last value (naive)", *naive_cells, f"{naive_average[0]:.3f} / {naive_average[1]:.3f}"],
        ["DLinear (`--model linear`), ours", *map(_forecast_cell, linear), _average_cell(linear)],
        ["DLinear, `--keep-best --patience 3`, ours", *map(_forecast_cell, kept_best), _average_cell(kept_best)],
        ["DLinear, published", *published("linear")],
        ["fpt, frozen MiniLM, ours", *map(_forecast_cell, fpt_runs), _average_cell(fpt_runs)],
        ["One Fits All GPT2(6), published", *published("fpt")],
        ["PatchTST, published", *published("PatchTST")],
    ]
    return _markdown([f"{dataset}, test MSE / MAE"] + [f"H={h}" for h in HORIZONS] + ["average"], rows)


def forecasting_table() -> str:
    """ETTh1 and ETTh2, look-back 336: test MSE / MAE of our runs (every test window, scored once at
    each run's end) beside the published figures (fpt.experiments.paper.PUBLISHED_FORECASTS; the
    averages are One Fits All's Table 3, the DLinear per-horizon figures the DLinear paper's)."""
    return _dataset_forecasts("ETTh1") + "\n\n" + _dataset_forecasts("ETTh2")


def uea_table() -> str:
    """UEA sets bundled with sktime: test accuracy, scored once at each run's end, with the
    validation accuracy the run was watched on (benchmarks/results/headline/). A run that watched
    the test split itself (One Fits All's protocol, `...-test-watched-...`) says so: its test column
    is the last evaluation, then the best of all of them, which is the figure that protocol reports."""
    from fpt.experiments.paper import PUBLISHED_UEA

    rows = []
    for run in sorted([*HEADLINE.glob("japanese-vowels-*"), *HEADLINE.glob("basic-motions-*")]):
        if not (run / "summary.json").exists():
            continue
        summary, config = _json(run / "summary.json"), _json(run / "config.json")
        options = config["task_options"]
        published = PUBLISHED_UEA.get(f"ucr:{options['dataset']}", {}).get("fpt")
        series = "z-normalised" if options.get("znorm", True) else "raw"
        if summary["final"]["split"] != "test":
            watched = f"{_pct(summary['final']['accuracy'])} ({summary['final']['examples']})"
            test = f"{_pct(summary['test']['test']['accuracy'])} ({summary['test']['test']['examples']})"
        else:  # the test split was the watched one: its last score, and the best of every evaluation of it
            scores = [r for r in _jsonl(run / "metrics.jsonl") if r["split"].startswith("test")]
            best = max(scores, key=lambda r: r["accuracy"])
            series += ", test watched: not clean"
            watched = "-"
            test = (
                f"{_pct(scores[-1]['accuracy'])} ({scores[-1]['examples']}); best of {len(scores)} "
                f"evaluations {_pct(best['accuracy'])} at step {best['step']:,}"
            )
        row = [options["dataset"], series, str(config["seed"]), f"{config['steps']:,}", watched, test]
        rows.append(row + [f"{published[1]} ({published[0]})" if published else "-"])
    header = ["set", "series", "seed", "steps", "val (series)", "test (series)", "published"]
    return _markdown(header, rows)


def ucr_patching_table() -> str:
    """benchmarks/ucr_patching.py: the same GunPoint run at each --patch-size, its speed and test accuracy,
    then the reference methods each run scored on the same split (the same training series in every run)."""
    folder = RESULTS / "ucr_patching"
    runs = sorted(folder.glob("patch*/summary.json"), key=lambda p: int(p.parent.name.removeprefix("patch")))
    rows, baselines = [], {}
    for path in runs:
        summary = _json(path)
        notes = summary["task_notes"]
        rows.append(
            [
                f"fpt, {notes['patch_size']} steps a token",
                str(notes["tokens"]),
                f"{summary['ms_per_step']:.0f}",
                f"{summary['final']['accuracy'] * 100:.1f}",
                f"{summary['test']['test']['accuracy'] * 100:.1f}",
                f"{summary['wall_time_s']:.0f}",
            ]
        )
        baselines = {name: s["accuracy"] for name, s in summary["baselines"]["scores"].items()}
    rows += [[name, "-", "-", "-", f"{accuracy * 100:.1f}", "-"] for name, accuracy in baselines.items()]
    header = ["method", "tokens", "ms a step", "val accuracy %", "test accuracy %", "run s"]
    return _markdown(header, rows) + "\n"


def ucr_table() -> str:
    """`fpt reproduce ucr`'s table (issue 57) of the committed runs under results/ucr/, written by fpt's
    own writer (fpt.experiments.ucr_tables), as `fpt reproduce ucr` writes OUT/ucr.md."""
    from fpt.experiments.ucr_tables import read_ucr_runs, ucr_markdown

    return ucr_markdown(read_ucr_runs(RESULTS / "ucr"), "fpt beside MiniRocket on sktime's UCR/UEA sets")
