"""Rolling-origin backtests of a run over a collection of series (`fpt backtest RUN --origins N
[--step S]`): the run's recipe evaluated at N forecast origins, rolling back from the end.

- Origin 1 is the run's own test split (its recorded scores, not trained again). Origin k cuts the
  last (k - 1) x S observations off every series (S defaults to the horizon: blocks that do not
  overlap) and scores the `horizon` after the cut: the task option `cutoff`
  (fpt.data.collection.cut_collection), so each origin is an ordinary run, RUN/backtest/origin-k,
  with its own config.json and summary.json, resumable as any run.
- Honest re-estimation: each origin trains the run's configuration (the same options, budget and
  seed; its look-back and patches as the run chose them, so every origin trains the same model) on
  the series as they stood at the cut, validating on the horizon before it: no scored value is
  ever a training or validation target. Series left too short at a cut are skipped and counted.
- Each origin is scored in the series' units by the run's own code (sMAPE, MASE, OWA) beside the
  statsforecast baselines at the same origin, which each origin run computes at its end as every
  run does (fpt.training.reference_scores); origin 1 computes them if the run skipped them.
- RUN/backtest/backtest.json and backtest.csv hold each origin's scores and their mean over the
  origins (a plain mean: each origin weighs alike, whatever its count of series).

ETTh and `forecast:FILE.csv` runs are refused: their test split already scores every window of
their fixed test borders, a rolling-origin evaluation with a step of 1.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fpt.core.errors import FptError
from fpt.core.paths import write_json, write_text
from fpt.training.config import TrainConfig
from fpt.training.run_dir import RunDir

COLLECTION_TASKS = ("m1", "m3", "tourism", "panel")  # the tasks that take `cutoff`
WINDOW_TASKS = ("ett", "forecast")  # fixed borders, every test window scored: rolling origin at step 1
METRICS = ("smape", "mase", "owa")
RESULT, TABLE = "backtest.json", "backtest.csv"
PINNED = ("lookback", "patch_size", "patch_stride")  # as the run chose them: one model shape at every origin
# Settings an origin may hold otherwise than the run and the backtest ask: where it computed (--device)
IGNORED = ("device", "threads")


@dataclass
class Origin:
    """Origin `number` (1 = the run's own test): `back` observations before the run's end, trained (2 and
    on) at the task option cutoff `cutoff` (the run's own plus `back`) in `path`."""

    number: int
    back: int
    cutoff: int
    path: Path


@dataclass
class Plan:
    """What a backtest will do: the run's config, its task (origin 1's), the step and the origins."""

    run_dir: Path
    config: TrainConfig
    summary: dict
    task: object
    step: int
    origins: list[Origin]


def _check_count(value, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FptError(f"{what} must be a whole number of at least 1, got {value!r}")


def check_task(config: TrainConfig, run_dir: Path) -> None:
    """Refuse, in one line, a run whose task is no collection of series (`fpt backtest` cuts series)."""
    kind = config.task.partition(":")[0]
    if kind in WINDOW_TASKS:
        raise FptError(
            f"{run_dir} trained {config.task}, whose test split already is a rolling-origin evaluation: it "
            "scores every window of the test borders, each origin one step after the last (a step of 1)"
        )
    if kind not in COLLECTION_TASKS:
        raise FptError(
            f"{run_dir} trained {config.task}, not a collection of series; fpt backtest takes a run of "
            f"{', '.join(f'{name}:' for name in COLLECTION_TASKS)}..."
        )


def plan_backtest(run_dir: Path, origins: int, step: int | None = None) -> Plan:
    """The origins of a backtest of the finished run in `run_dir`, everything checked before any
    training: N at least 1, a step of at least 1 (None: the horizon), a collection task, a finished run
    that scored its test split in the series' units, and an N whose last origin leaves some series of
    two horizons and one observation (else one line naming the largest N that fits)."""
    from fpt.training.build import build_task
    from fpt.training.reference_scores import scored_tests

    _check_count(origins, "--origins")
    if step is not None:
        _check_count(step, "--step")
    run = RunDir.existing(run_dir)
    config = TrainConfig.from_dict(run.read_config(), where=str(run.config_path))
    check_task(config, run_dir)
    summary = run.read_summary()
    if summary is None:
        raise FptError(f"{run_dir} has not finished (no summary.json); finish it with `fpt train --resume {run_dir}`")
    if "smape" not in scored_tests(summary).get("test", {}):
        raise FptError(
            f"{run_dir} recorded no test sMAPE (a run under --nproc scores none in the series' units); "
            "train it again in one process, without --nproc"
        )
    built = build_task(config)
    task = getattr(built, "inner", built)  # under --bucket-window: the task itself
    horizon = task.collection.horizon
    step = horizon if step is None else step
    needed, longest = 2 * horizon + 1, max(len(values) for values in task.observed)
    fits = (longest - needed) // step + 1
    if origins > fits:
        raise FptError(
            f"--origins {origins} at --step {step} cuts {(origins - 1) * step} observations off every series of "
            f"{task.name}, leaving none of the {needed} a series needs (the longest has {longest}); "
            f"at most {fits} origins fit"
        )
    base = config.task_options.get("cutoff") or 0
    folder = Path(run_dir) / RunDir.DERIVED
    planned = [Origin(k, (k - 1) * step, base + (k - 1) * step, folder / f"origin-{k}") for k in range(1, origins + 1)]
    return Plan(Path(run_dir), config, summary, task, step, planned)


def origin_config(plan: Plan, origin: Origin, device: str | None = None) -> TrainConfig:
    """The run's config at an earlier origin: its task cut by `origin.cutoff`, its look-back and patches
    pinned as the run chose them, the baselines on (they are half of what a backtest compares)."""
    options = {**plan.config.task_options, "cutoff": origin.cutoff}
    for key in PINNED:
        if options.get(key) is None:
            options[key] = plan.task.notes[key]
    # the run's steps (its plan records the epochs they came from too; a new run takes one of the two)
    config = dataclasses.replace(plan.config, task_options=options, baselines=True, epochs=None)
    if device is not None:
        config.device = device
    return config


def _check_same_settings(origin: Origin, expected: TrainConfig) -> None:
    """Refuse an origin's folder trained with other settings (another --step, a changed run)."""
    found = RunDir(origin.path).read_config()
    wanted = dataclasses.asdict(expected)
    for key in sorted(set(found) | set(wanted)):
        if key in IGNORED or found.get(key) == wanted.get(key):
            continue
        options = found.get(key) if key == "task_options" and isinstance(found.get(key), dict) else None
        if options is not None and options.get("cutoff") != origin.cutoff:
            differs = f"at cutoff {options.get('cutoff')}, not {origin.cutoff}"
        else:
            differs = f"with another {key} than this backtest's"
        raise FptError(
            f"{origin.path} was trained {differs} (another --step, or a changed run); delete it to train it again"
        )


def train_origin(plan: Plan, origin: Origin, progress: bool, device: str | None) -> dict:
    """Origin k's summary: trained now, resumed where a previous backtest stopped, or read where it finished."""
    from fpt.training.lifecycle import resume, train

    config = origin_config(plan, origin, device)
    run = RunDir(origin.path)
    if (origin.path / RunDir.CONFIG).is_file():
        _check_same_settings(origin, config)  # checked before the first origin too: again, in case it changed
        if run.is_finished:
            return run.read_summary()
        return resume(origin.path, progress=progress, device=device)[0]
    return train(config, out=origin.path, progress=progress)[0]


def _finite(value) -> float | None:
    """A score as JSON holds it: None where it is NaN (an OWA whose Naive2 is perfect)."""
    return None if value is None or not math.isfinite(value) else float(value)


def _scores(result: dict) -> dict:
    return {metric: _finite(result.get(metric)) for metric in METRICS}


def origin_result(plan: Plan, origin: Origin, summary: dict, seconds: float) -> dict:
    """One origin's line of backtest.json: fpt's test scores and each baseline's on the same split."""
    from fpt.training.reference_scores import baseline_scores, scored_tests

    test = scored_tests(summary)["test"]
    beside = summary.get("baselines")
    if beside is None:  # origin 1 of a run trained with --no-baselines: computed now, as the run would have
        beside = baseline_scores(plan.task, summary)
    notes = summary.get("task_notes") or {}
    return {
        "origin": origin.number,
        "back": origin.back,
        "cutoff": origin.cutoff,
        "run": str(plan.run_dir if origin.number == 1 else origin.path),
        "series": test.get("series"),
        "skipped": (notes.get("skipped") or {}).get("count", 0),
        "seconds": round(seconds, 1),  # this sitting's: 0 for an origin a previous backtest finished
        "train_seconds": summary.get("wall_time_s"),  # the origin run's own training time
        "fpt": _scores(test),
        "baselines": {name: _scores(scores) for name, scores in beside["scores"].items()},
    }


def _mean(values: list) -> float | None:
    kept = [v for v in values if v is not None]
    return None if len(kept) < len(values) or not kept else sum(kept) / len(kept)


def mean_scores(results: list[dict]) -> dict:
    """{method: {metric: its mean over the origins}} for fpt and every baseline each origin scored; a
    metric some origin has no value of (None) has no mean either."""
    from fpt.reference.classical import KNOWN

    shared = [m for m in results[0]["baselines"] if all(m in r["baselines"] for r in results)]
    # in fpt train's order (summary.json sorts its keys): Naive, SeasonalNaive, Naive2, Theta, AutoETS
    methods = ["fpt", *sorted(shared, key=lambda m: (KNOWN.index(m) if m in KNOWN else len(KNOWN), m))]

    def scores(result: dict, method: str) -> dict:
        return result["fpt"] if method == "fpt" else result["baselines"][method]

    return {m: {metric: _mean([scores(r, m)[metric] for r in results]) for metric in METRICS} for m in methods}


def mean_verdict(means: dict, origins: int) -> str:
    """One plain sentence: fpt's mean sMAPE over the origins against the best baseline's."""
    ours = means["fpt"]["smape"]
    baselines = {name: s["smape"] for name, s in means.items() if name != "fpt" and s["smape"] is not None}
    if ours is None or not baselines:
        return f"over {origins} origins, no mean sMAPE to compare"
    best = min(baselines, key=baselines.get)
    over = f"over {origins} origin{'s' if origins > 1 else ''}"
    if round(baselines[best], 6) == round(ours, 6):
        return f"{best} scores as fpt does {over} (mean sMAPE {ours:.2f})"
    if baselines[best] < ours:
        return f"{best} beats fpt {over} (mean sMAPE {baselines[best]:.2f} against fpt's {ours:.2f})"
    return f"fpt beats every baseline {over} (mean sMAPE {ours:.2f}; the best, {best}, {baselines[best]:.2f})"


def _number(value, places: int) -> str:
    return "-" if value is None else f"{value:.{places}f}"


def table_lines(results: list[dict], means: dict) -> list[str]:
    """The printed table: each method's sMAPE at each origin, then its mean sMAPE, MASE and OWA."""
    head = f"{'method':<14}" + "".join(f"{'origin ' + str(r['origin']):>10}" for r in results)
    lines = [head + f"{'mean sMAPE':>12}{'MASE':>8}{'OWA':>8}"]
    for method, mean in means.items():
        per = [r["fpt"] if method == "fpt" else r["baselines"][method] for r in results]
        row = f"{method:<14}" + "".join(f"{_number(s['smape'], 2):>10}" for s in per)
        lines.append(row + f"{_number(mean['smape'], 2):>12}{_number(mean['mase'], 3):>8}{_number(mean['owa'], 3):>8}")
    return lines


def table_csv(results: list[dict], means: dict) -> str:
    """backtest.csv: one row per origin and method (origin, back, cutoff, method, series, smape, mase, owa;
    the methods of `means`, in its order), then the means (origin "mean")."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["origin", "back", "cutoff", "method", "series", *METRICS])
    for r in results:
        for method in means:
            scores = r["fpt"] if method == "fpt" else r["baselines"][method]
            row = [r["origin"], r["back"], r["cutoff"], method, r["series"]]
            writer.writerow(row + ["" if scores[m] is None else repr(scores[m]) for m in METRICS])
    for method, scores in means.items():
        writer.writerow(["mean", "", "", method, ""] + ["" if scores[m] is None else repr(scores[m]) for m in METRICS])
    return out.getvalue()


def run_backtest(
    run_dir: Path,
    origins: int,
    step: int | None = None,
    progress: bool = False,
    device: str | None = None,
    say: Callable[[str], None] = print,
) -> dict:
    """Backtest the finished run in `run_dir` at `origins` origins `step` apart (default: its horizon),
    writing RUN/backtest/backtest.json and backtest.csv; returns what backtest.json holds. `say` gets a line
    as each origin starts and ends, then the table and the verdict. The run is locked meanwhile: a resume
    of it would change origin 1 under the backtest."""
    plan = plan_backtest(run_dir, origins, step)
    for origin in plan.origins[1:]:  # an origin a backtest at another step left: refused before any work
        if (origin.path / RunDir.CONFIG).is_file():
            _check_same_settings(origin, origin_config(plan, origin, device))
    owner = RunDir(run_dir)
    owner.lock()
    try:
        results = []
        for origin in plan.origins:
            where = "the run's own test split" if origin.number == 1 else str(origin.path)
            say(f"origin {origin.number}/{origins} ({origin.back} observations back): started, {where}")
            started = time.perf_counter()
            summary = plan.summary if origin.number == 1 else train_origin(plan, origin, progress, device)
            results.append(origin_result(plan, origin, summary, time.perf_counter() - started))
            fpt = results[-1]["fpt"]
            say(
                f"origin {origin.number}/{origins} done in {results[-1]['seconds']:.1f} s: "
                f"fpt sMAPE {_number(fpt['smape'], 2)} on {results[-1]['series']} series"
            )
        return _write(plan, results, say)
    finally:
        owner.unlock()


def _write(plan: Plan, results: list[dict], say: Callable[[str], None]) -> dict:
    """backtest.json and backtest.csv, then the table and the verdict said."""
    means = mean_scores(results)
    verdict = mean_verdict(means, len(results))
    record = {
        "run": str(plan.run_dir),
        "task": plan.config.task,
        "horizon": plan.task.collection.horizon,
        "step": plan.step,
        "origins": len(results),
        "results": results,
        "mean": means,
        "verdict": verdict,
    }
    folder = plan.run_dir / RunDir.DERIVED
    written = write_json(folder / RESULT, record)
    write_text(folder / TABLE, table_csv(results, means))
    say(f"sMAPE at each origin ({plan.step} observations apart), and the means over the {len(results)}:")
    for line in table_lines(results, means):
        say(line)
    say(verdict)
    say(f"written: {written} and {TABLE} beside it")
    return record
