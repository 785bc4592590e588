"""`fpt reproduce controls --lr-search ARM=R1,R2,...`: an arm's own learning rate, chosen on validation.

Issue 32 allows two fair protocols: one recipe for every arm, or each arm's best recipe chosen the same
way, stated. Training every weight from scratch (`full`) learns nothing at the rate that suits a frozen
body (JapaneseVowels: chance at 3e-3, 97.7% at 3e-4), so its gap to fpt would measure the rate. Here
each searched arm trains seed 0 once per rate (its "probes", under OUT/rate-probes/, which no table
reads); the rate with the best final score on the validation split (the split watched while training,
never the test split; ties: the lower val loss, then the lower rate) is then that arm's rate on every
seed, in its own sweep folder (OUT/<task>-<arm>-lr). Seed 0 at the chosen rate is the probe itself,
copied, not trained twice.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

from fpt.errors import FptError
from fpt.experiments.cell_records import cell_run
from fpt.experiments.spec import SweepSpec
from fpt.runs import RunDir
from fpt.scores import headline_metric, is_regression

PROBES = "rate-probes"  # OUT/rate-probes/: the runs a rate was chosen from; tables leave them out


def parse_lr_search(items: list[str] | None) -> dict[str, list[float]]:
    """["full=1e-4,3e-4"] -> {"full": [1e-4, 3e-4]}; one clear line for anything else."""
    searched: dict[str, list[float]] = {}
    for item in items or []:
        arm, sep, text = item.partition("=")
        try:
            rates = [float(r) for r in text.split(",") if r.strip()]
        except ValueError:
            rates = []
        if not sep or not arm or not rates:
            raise FptError(f"--lr-search takes ARM=RATE,RATE,... (e.g. --lr-search full=1e-4,3e-4), got {item!r}")
        if arm in searched:
            raise FptError(f"--lr-search {arm} is given twice; give all its rates in one list")
        searched[arm] = rates
    return searched


def check_rates(searched: dict[str, list[float]], arms: list[str], skipped: tuple[str, ...]) -> None:
    """Refuse an unknown or skipped arm, fewer than two rates, a rate given twice or not above 0."""
    for arm, rates in searched.items():
        if arm not in arms:
            raise FptError(f"--lr-search: no arm {arm!r} in these tables; choose from {', '.join(arms)}")
        if arm in skipped:
            raise FptError(f"--lr-search {arm}: it is in --skip-variants; search it or skip it, not both")
        if len(rates) < 2 or len(set(rates)) < len(rates):
            raise FptError(f"--lr-search {arm}: give at least two different rates to choose from")
        if not all(math.isfinite(r) and r > 0 for r in rates):
            raise FptError(f"--lr-search {arm}: every rate must be a number above 0")


def own_rate_folder(folder: str, arm: str) -> str:
    """The sweep folder of an arm trained at its own rate, beside the task's shared one."""
    return f"{folder}-{arm}-lr"


def probe_spec(name: str, task: str, arm: str, rates: list[float], axes: dict, options: dict, parallel: int):
    """Seed 0 of `arm` once per rate, with every other option the arm's cells have."""
    grid = {"task": [task], "variant": [arm], **axes, "lr": list(rates), "seed": [0]}
    return SweepSpec(name, grid, options, parallel)


def val_key(run_dir: Path) -> tuple[float, float] | None:
    """How a probe ranks (lower is better): its final score on the validation split, then its val loss;
    None where it did not finish. A run whose final split is a test split is refused: a rate chosen
    there would have looked at the test split."""
    summary = RunDir(run_dir).read_summary()
    if summary is None:
        return None
    final = summary["final"]
    if final["split"] == "test" or final["split"].startswith("test_"):
        raise FptError(
            f"--lr-search chooses on validation, and {run_dir} has none (it was watched on {final['split']}); "
            "give the runs a validation split (e.g. --set val_size=N)"
        )
    metric = headline_metric(final)
    score = final[metric] if is_regression(final) else -final[metric]
    return tuple(x if math.isfinite(x) else math.inf for x in (score, final.get("loss", math.inf)))


def choose_rate(rows: list[dict]) -> tuple[float, Path]:
    """The best probe's rate and run folder (val_key; ties: the lower rate)."""
    ranked = []
    for row in rows:
        key = val_key(Path(row["run_dir"])) if row.get("status") == "done" else None
        if key is not None:
            ranked.append((key, float(row["lr"]), Path(row["run_dir"])))
    if not ranked:
        raise FptError("--lr-search: no probe finished, so no rate can be chosen; see its results.csv")
    _, rate, run_dir = min(ranked, key=lambda item: (item[0], item[1]))
    return rate, run_dir


def adopt_probe(probe_dir: Path, spec: SweepSpec, sweep_dir: Path) -> None:
    """Copy the chosen probe into the own-rate sweep as its seed-0 cell (the same run: same options,
    rate and seed), unless that cell has a run already."""
    seed0 = next(cell for cell in spec.cells() if cell.values.get("seed") == 0)
    target = cell_run(sweep_dir, seed0).path
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(probe_dir, target)


def probe_lines(probes: dict[tuple[str, str], tuple[list[dict], float]]) -> str:
    """The note that says how each searched arm's rate was chosen, with every probe's val score."""
    if not probes:
        return ""
    parts = []
    for (task, arm), (rows, chosen) in probes.items():
        scores = []
        for row in rows:
            summary = RunDir(Path(row["run_dir"])).read_summary() if row.get("status") == "done" else None
            if summary is None:
                scores.append(f"{float(row['lr']):g}: {row.get('status', 'not run')}")
                continue
            final = summary["final"]
            metric = headline_metric(final)
            value = final[metric] if is_regression(final) else 100 * final[metric]
            scores.append(f"{float(row['lr']):g}: {metric} {value:.{3 if is_regression(final) else 1}f}")
        parts.append(f"{arm} on {task}: {chosen:g} ({'; '.join(scores)})")
    return (
        " Rates of their own (--lr-search): each chosen by seed 0's final score on the validation split "
        f"(ties: the lower val loss), then used on every seed: {'. '.join(parts)}."
    )
