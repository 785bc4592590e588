"""The front page's one table, the headline claims each read from its runs: the `headline` table of
README.md."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from .common import RESULTS, _count, _json, _markdown
from .converged import paper_figure
from .precision import MNIST_30_MINUTES
from .time_series import (
    HORIZONS,
    _average_cell,
    _finished,
    _forecast_cell,
    _fpt_forecast_pattern,
    _horizon_runs,
    _linear_pattern,
    _tests,
)


@dataclass(frozen=True)
class Headline:
    task: str  # the task column's words
    model: str  # the model column's words
    runs: tuple[str, ...]  # run directories under benchmarks/results/, one per seed
    horizon: int = 0  # a forecast's horizon: the row reads test MSE / MAE instead of accuracy
    # a forecast averaged over HORIZONS (the published tables' summary) instead of `runs`: a folder
    # pattern with {h} for the horizon, whose seeds are the folders `pattern-seed*`
    average_of: str = ""


HEADLINES = [
    Headline(
        "MNIST",
        "frozen MiniLM, pretrained, fast recipe without dropout (fp32), 16,000 steps fixed in advance, 5,000 "
        "training images held out as val",
        tuple(f"headline/mnist-fpt-fast16k-val5k-seed{seed}" for seed in range(3)),
    ),
    Headline(
        "MNIST",
        "the same in 30 minutes of two cores with native bf16: 7x7 patches (16 tokens), bf16, 13,000 steps fixed "
        "in advance by wall-clock arithmetic",
        tuple(f"headline/{name}" for name in MNIST_30_MINUTES),
    ),
    Headline(
        "MNIST",
        "earlier runs of the same recipe (bf16) without a val split",
        (
            "converge/mnist-fpt-fast16k-dropout0-seed0",
            "converge/mnist-fpt-fast16k-dropout0-seed1",
            "converge/mnist-fpt-fast16k-dropout0-seed2",
        ),
    ),
    Headline("MNIST", "the same with random frozen weights", ("converge/mnist-random-fast16k-dropout0-seed0",)),
    Headline(
        "Fashion-MNIST",
        "frozen MiniLM, pretrained, the same recipe",
        ("converge/fashion-mnist-fpt-fast16k-dropout0-seed0",),
    ),
    Headline(
        "Fashion-MNIST",
        "the same with random frozen weights",
        ("converge/fashion-mnist-random-fast16k-dropout0-seed0",),
    ),
    Headline(
        "Fashion-MNIST",
        "pretrained, 5,000 training images held out as val",
        (
            "converge/fashion-mnist-fpt-fast16k-dropout0-val5k-seed0",
            "converge/fashion-mnist-fpt-fast16k-dropout0-val5k-seed1",
        ),
    ),
    Headline(
        "Bit Memory",
        "frozen MiniLM, pretrained, fast recipe without dropout, stopped at 99",
        (
            "converge/bit-memory-fpt-fast-dropout0-eval100-seed0",
            "converge/bit-memory-fpt-fast-dropout0-eval100-seed1",
            "converge/bit-memory-fpt-fast-dropout0-eval100-seed2",
        ),
    ),
    Headline(
        "Bit Memory",
        "clean protocol: a constant rate for 1,000 steps, chosen on held-out curves",
        (
            "headline/bit-memory-fpt-fast1k-constant-seed0",
            "headline/bit-memory-fpt-fast1k-constant-seed1",
            "headline/bit-memory-fpt-fast1k-constant-seed2",
        ),
    ),
    Headline(
        "ListOps (LRA input)",
        "frozen MiniLM, pretrained, fast recipe, 1,000 steps",
        ("converge/listops-fpt-fast-seed0",),
    ),
    Headline(
        "ETTh1, look-back 336",
        "DLinear (`--model linear`), trained by fpt's loop",
        (
            "forecasting/linear/ETTh1-h96-seed0",
            "forecasting/linear/ETTh1-h96-seed1",
            "forecasting/linear/ETTh1-h96-seed2",
        ),
        horizon=96,
    ),
    Headline(
        "ETTh1, look-back 336",
        "frozen MiniLM, fast recipe, 1,500 steps",
        (
            "headline/etth1-96-fpt-fast1500-seed0",
            "headline/etth1-96-fpt-fast1500-seed1",
            "headline/etth1-96-fpt-fast1500-seed2",
        ),
        horizon=96,
    ),
    Headline(
        "ETTh2, look-back 336",
        "DLinear (`--model linear`), its recipe chosen on ETTh2 validation",
        tuple(f"forecasting/linear_etth2/ETTh2-h96-seed{seed}" for seed in range(3)),
        horizon=96,
    ),
    Headline(
        "ETTh2, look-back 336",
        "frozen MiniLM, the ETTh1 row's recipe and budget",
        tuple(f"headline/etth2-96-fpt-fast1500-seed{seed}" for seed in range(3)),
        horizon=96,
    ),
    *(
        Headline(f"{dataset}, look-back 336", model, (), average_of=pattern)
        for dataset in ("ETTh1", "ETTh2")
        for model, pattern in (
            ("DLinear (`--model linear`), the H=96 row's recipe", _linear_pattern(dataset)),
            ("frozen MiniLM, the H=96 row's recipe and budget", _fpt_forecast_pattern(dataset)),
        )
    ),
    Headline(
        "JapaneseVowels (UEA)",
        "frozen MiniLM, pretrained, raw series, 1,000 steps",
        (
            "headline/japanese-vowels-fpt-fast1k-val50-raw-seed0",
            "headline/japanese-vowels-fpt-fast1k-val50-raw-seed1",
            "headline/japanese-vowels-fpt-fast1k-val50-raw-seed2",
        ),
    ),
]


def _headline_score(run: Path) -> tuple[float, str]:
    """A run's reported accuracy and where it was scored: the test split scored once at the end where
    the run has one apart from the split it watched, else its final evaluation on the split it watched."""
    summary = _json(run / "summary.json")
    final = summary["final"]
    split = {"heldout": "held-out"}.get(final["split"], final["split"])
    evaluation = run / "evaluation.json"
    test = _json(evaluation)["splits"].get("test") if evaluation.exists() else (summary.get("test") or {}).get("test")
    if test is not None and final["split"] != "test":
        return test["accuracy"], f"test ({test['examples']:,}), scored once at the end; {split} watched"
    return final["accuracy"], f"{split} ({final['examples']:,}), watched while training"


def _folders(names: tuple[str, ...]) -> str:
    """`a-seed0`, `a-seed1` -> `a-seed{0,1}`: one cell for the seeds of one recipe."""
    stems = {re.sub(r"seed\d+$", "", name) for name in names}
    if len(names) > 1 and len(stems) == 1:
        seeds = ",".join(re.search(r"seed(\d+)$", name).group(1) for name in names)
        return f"`{stems.pop()}seed{{{seeds}}}`"
    return ", ".join(f"`{name}`" for name in names)


def _average_headline(row: Headline) -> list[str]:
    """A forecast's four-horizon average beside the published one, with the seeds behind each horizon."""
    from fpt.experiments.paper import PUBLISHED_FORECASTS

    per_horizon = _horizon_runs(row.average_of)
    folders = f"`{row.average_of.replace('{h}', '{' + ','.join(map(str, HORIZONS)) + '}')}-seed*`"
    where = (
        f"test MSE / MAE, the average over H={', '.join(map(str, HORIZONS))}, each scored once at the end; val watched"
    )
    if not any(per_horizon):
        return [row.task, row.model, "-", "-", where, folders]
    config = _json(next(runs for runs in per_horizon if runs)[0] / "config.json")
    figures = PUBLISHED_FORECASTS[(config["task"], "avg")]
    model = config.get("model", "fpt")
    named = [model, "PatchTST"] if model == "fpt" else [model]  # beside fpt, PatchTST's: the figure to beat
    paper = "; ".join(f"{figures[n][1]:.3f} / {figures[n][2]:.3f} ({figures[n][0]})" for n in named if n in figures)
    summaries = [_finished(runs) for runs in per_horizon]
    seeds = ", ".join(str(len(_tests(runs))) for runs in summaries)
    ours = f"{_average_cell(summaries)} (seeds per horizon: {seeds})"
    return [row.task, row.model, paper or "-", ours, where, folders]


def headline_table() -> str:
    from fpt.experiments.paper import PUBLISHED_FORECASTS, PUBLISHED_UEA

    rows = []
    for row in HEADLINES:
        if row.average_of:
            rows.append(_average_headline(row))
            continue
        runs = [RESULTS / name for name in row.runs]
        config = _json(runs[0] / "config.json")
        if row.horizon:  # a forecast: test MSE / MAE, scored once at each run's end
            ours = _forecast_cell(_finished(runs))
            published = PUBLISHED_FORECASTS.get((config["task"], row.horizon), {}).get(config.get("model", "fpt"))
            paper = "-" if published is None else f"{published[1]:.3f} / {published[2]:.3f} ({published[0]})"
            where = f"test MSE / MAE, H={row.horizon}, scored once at the end; val watched"
        else:
            scores = [_headline_score(run) for run in runs]
            values = [100 * accuracy for accuracy, _ in scores]
            ours = (
                f"{values[0]:.2f}"
                if len(values) == 1
                else f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f} "
                f"({', '.join(f'{v:.2f}' for v in values)}; {_count(len(values))} seeds)"
            )
            where = "accuracy %, " + scores[0][1]
            uea = PUBLISHED_UEA.get(f"ucr:{(config.get('task_options') or {}).get('dataset')}")
            paper = f"{uea['fpt'][1]} ({uea['fpt'][0]})" if config["task"] == "ucr" and uea else paper_figure(config)
        rows.append([row.task, row.model, paper, ours, where, _folders(row.runs)])
    return _markdown(["task", "model", "paper or published", "ours", "scored on", "runs (benchmarks/results/)"], rows)
