"""`fpt reproduce controls --lr-search ARM=R1,R2,...`: an arm's own learning rate, chosen on validation.

Issue 32 allows two fair protocols: one recipe for every arm, or each arm's best recipe chosen the same
way, stated. Training every weight from scratch (`full`) learns nothing at the rate that suits a frozen
body (JapaneseVowels: chance at 3e-3, 97.7% at 3e-4), so its gap to fpt would measure the rate. Here
each searched arm trains seed 0 once per rate (its "probes", under OUT/rate-probes/, which no table
reads); the rate with the best final score on the validation split (the split watched while training,
never a test split; ties: the lower val loss, then the lower rate) is then that arm's rate on every
seed, in its own sweep folder (OUT/<task>-<arm>-lr). Seed 0 at the chosen rate is the probe itself,
copied, not trained twice. A probe that diverged lost; any other failure leaves the rate unchosen
until it is fixed. The choice is kept (chosen.json beside the probes), so running the command again
neither trains the probes again nor chooses anew.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from fpt.core.errors import DIVERGED, FptError
from fpt.core.paths import write_json
from fpt.core.scores import headline_metric, is_regression
from fpt.experiments.cell_records import cell_run, check_cells_unchanged
from fpt.experiments.paper import CONTROL_ARMS, FEW_SHOT, PAPER_VARIANTS
from fpt.experiments.sweep_spec import SweepSpec
from fpt.tasks.base import is_test_split
from fpt.tasks.registry import task_label
from fpt.training.run_dir import RunDir

PROBES = "rate-probes"  # OUT/rate-probes/: the runs a rate was chosen from; tables leave them out
OWN_RATE = "-lr"  # OUT/<task>-<arm>-lr: an arm trained at its own rate
CHOSEN = "chosen.json"  # beside an arm's probes: the rates searched, the one chosen, every probe's row
LOST = "diverged"  # a probe row's status where its rate diverged: a result of the search, not a failure


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


def check_rates(searched: dict[str, list[float]], tables: list[str], arms: list[str], skipped: tuple[str, ...]) -> None:
    """Refuse a search for tables other than the controls, an unknown or skipped arm, fewer than two rates, a
    rate given twice or not above 0."""
    if tables != ["controls"]:
        raise FptError("--lr-search is for the controls table alone: `fpt reproduce controls --lr-search ...`")
    for arm, rates in searched.items():
        if arm not in arms:
            raise FptError(f"--lr-search: no arm {arm!r} in these tables; choose from {', '.join(arms)}")
        if arm in skipped:
            raise FptError(f"--lr-search {arm}: it is in --skip-variants; search it or skip it, not both")
        if len(rates) < 2 or len(set(rates)) < len(rates):
            raise FptError(f"--lr-search {arm}: give at least two different rates to choose from")
        if not all(math.isfinite(r) and r > 0 for r in rates):
            raise FptError(f"--lr-search {arm}: every rate must be a number above 0")


def check_has_validation(task: str, options: dict) -> None:
    """Refuse, before anything trains, a task that would be watched on its test split: a rate chosen
    there would have looked at it (MNIST-like tasks hold out a validation split only with val_size)."""
    from fpt.tasks import TASK_OPTIONS
    from fpt.tasks.registry import task_options

    resolved = task_options(task, {k: v for k, v in options.items() if k in TASK_OPTIONS})
    if "val_size" in resolved and not resolved["val_size"]:
        raise FptError(
            f"--lr-search chooses on validation, and {task} has none unless it holds some out: run it apart "
            f"from the tasks that take no val_size (--tasks {task}) with --set val_size=N, or leave it out"
        )


def own_rate_folder(folder: str, arm: str) -> str:
    """The sweep folder of an arm trained at its own rate, beside the task's shared one."""
    return f"{folder}-{arm}{OWN_RATE}"


def is_own_rate_run(run_dir: Path, arm: str) -> bool:
    """Whether a run is an arm's at its own rate: it lies in OUT/<task>-<arm>-lr/runs/."""
    return Path(run_dir).parent.parent.name.endswith(f"-{arm}{OWN_RATE}")


def probe_spec(
    name: str, task: str, arm: str, rates: list[float], axes: dict, options: dict, parallel: int
) -> SweepSpec:
    """Seed 0 of `arm` once per rate, with every other option the arm's cells have."""
    grid = {"task": [task], "variant": [arm], **axes, "lr": list(rates), "seed": [0]}
    return SweepSpec(name, grid, options, parallel, variants=PAPER_VARIANTS)


class NoRateYet(FptError):
    """No rate can be chosen from these probes yet: one failed other than by diverging, or none finished."""


def val_key(run_dir: Path) -> tuple[float, float] | None:
    """How a probe ranks (lower is better): its final score on the validation split, then its val
    loss; None where it did not finish. A run watched on a test split is refused."""
    summary = RunDir(run_dir).read_summary()
    if summary is None:
        return None
    final = summary["final"]
    if is_test_split(final["split"]):
        raise FptError(
            f"--lr-search chooses on validation, and {run_dir} has none (it was watched on {final['split']}); "
            "give the task a validation split (--set val_size=N where it takes one)"
        )
    metric = headline_metric(final)
    return (final[metric] if is_regression(final) else -final[metric]), final["loss"]


def choose_rate(rows: list[dict], where: Path) -> tuple[float, Path]:
    """The best probe's rate and run folder (val_key; ties: the lower rate). NoRateYet while a probe
    failed other than by diverging (fixed, it may win), or where none finished."""
    ranked = []
    for row in rows:
        if row.get("status") == "failed" and row.get("failure") != DIVERGED:
            raise NoRateYet(
                f"--lr-search: the probe at lr {float(row['lr']):g} failed ({row.get('error')}); fix it and "
                f"run the command again to choose a rate (see {where / 'results.csv'})"
            )
        key = val_key(Path(row["run_dir"])) if row.get("status") == "done" else None
        if key is not None:
            ranked.append((key, float(row["lr"]), Path(row["run_dir"])))
    if not ranked:
        raise NoRateYet(f"--lr-search: every probe diverged, so no rate is chosen; try lower rates (see {where})")
    _, rate, run_dir = min(ranked, key=lambda item: (item[0], item[1]))
    return rate, run_dir


def search_rates(probe_sweeps: list[tuple[str, str, str, SweepSpec]], out: Path, run_sweep) -> dict:
    """(task, arm) -> its choice: read from the record a run of the same command kept (CHOSEN), or
    made now from the probes `run_sweep(spec, folder)` trains; a choice made now is kept once its
    arm's sweep accepts it (adopt_choice). Where no rate can be chosen yet, the record has "error"."""
    records = {}
    for task, arm, folder, spec in probe_sweeps:
        where = out / folder
        record = recorded_choice(where, spec)
        if record is None:
            rows = [{**row, "sweep": folder} for row in run_sweep(spec, where)]
            record = {"task": task, "arm": arm, "rates": spec.grid["lr"], "probes": rows, "where": where}
            try:
                record["lr"], record["best"] = choose_rate(rows, where)
            except NoRateYet as exc:  # its failed probes (diverged ones too) make the command's status 1
                record["error"] = str(exc)
            else:  # a rate that diverged lost the search: a result, not a failure
                record["probes"] = [{**r, "status": LOST} if r.get("failure") == DIVERGED else r for r in rows]
        records[task, arm] = record
    return records


def recorded_choice(where: Path, spec: SweepSpec) -> dict | None:
    """The choice kept in WHERE/chosen.json, its paths read as lying under WHERE; None where there is
    none. Refused: other rates than it was chosen from, or probes now asked for with other options."""
    check_cells_unchanged(spec, where)  # the probes' records: another budget or recipe is refused
    path = where / CHOSEN
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    if sorted(record["rates"]) != sorted(spec.grid["lr"]):
        raise FptError(
            f"{path}: its rate was chosen from {', '.join(f'{r:g}' for r in record['rates'])}, not these rates; "
            "give those, or use another --out to search again"
        )
    return _resolved(record, where)


def read_choices(root: Path) -> dict[tuple[str, str], dict]:
    """Every choice kept under `root` (OUT/rate-probes/*/chosen.json), by (task, arm), the task named as
    the controls table names it (a few-shot search is not the full split's: both may lie under root)."""
    records = [_resolved(json.loads(p.read_text()), p.parent) for p in sorted(Path(root).rglob(CHOSEN))]
    return {(_searched_task(r), r["arm"]): r for r in records if PROBES in r["where"].parts}


def _searched_task(record: dict) -> str:
    """The controls task a kept choice searched, read from its probes' config.json (any probe: they
    differ in the rate alone); the bare task name where no probe left one."""
    for row in record["probes"]:
        config_path = Path(row["run_dir"]) / RunDir.CONFIG
        if config_path.is_file():
            return controls_task(json.loads(config_path.read_text()))
    return record["task"]


def controls_task(config: dict) -> str:
    """The task a run's config.json trained, as the controls table names it: runs on a share of the
    training split (--train-fraction, the few-shot setting) are a task of their own, never pooled with
    full ones."""
    label = task_label(str(config["task"]), config.get("task_options") or {})
    fraction = training_share(config)
    return label if fraction is None else f"{label}{FEW_SHOT}{100 * float(fraction):.4g}% of train)"


def training_share(config: dict) -> float | None:
    """The share of its training split a run trained on (--train-fraction); None for the whole split."""
    fraction = config.get("train_fraction")
    return None if fraction in (None, 1) else fraction


def _resolved(record: dict, where: Path) -> dict:
    """A kept record with its run folders (kept as names under WHERE/runs) made paths again."""
    runs = where / "runs"
    probes = [{**row, "run_dir": str(runs / row["run_dir"])} for row in record["probes"]]
    return {**record, "probes": probes, "best": runs / record["best"], "where": where}


def adopt_choice(record: dict, spec: SweepSpec, sweep_dir: Path) -> None:
    """Copy the chosen probe into the arm's own-rate sweep as its seed-0 cell (the same run: same
    options, rate and seed) unless it has one, whole or not at all (copied beside the probes, then
    moved), and keep the choice. A sweep run before at another rate is refused first, untouched."""
    check_cells_unchanged(spec, sweep_dir)
    seed0 = next(cell for cell in spec.cells() if cell.values.get("seed") == 0)
    target = cell_run(sweep_dir, seed0).path
    if not target.exists():
        partial = record["where"] / ".copying"  # under rate-probes/: no table reads it
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(record["best"], partial)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial.rename(target)
    if not (record["where"] / CHOSEN).is_file():
        names = {"best": record["best"].name, "probes": [_named(row) for row in record["probes"]]}
        kept = {k: v for k, v in record.items() if k not in ("where", "best", "probes")}
        write_json(record["where"] / CHOSEN, {**kept, **names})


def _named(row: dict) -> dict:
    return {**row, "run_dir": Path(row["run_dir"]).name}


def probe_section(records: dict[tuple[str, str], dict]) -> str:
    """What the table says under it about each searched arm: the rate chosen and every probe's score."""
    if not records:
        return ""
    lines = [
        "",
        "Rates of their own (--lr-search): each searched arm trained seed 0 once per rate; the best final "
        "score on the validation split (ties: the lower val loss, then the lower rate) chose the rate every "
        "seed then trained at. Seed 0 is that probe: its test score comes from the run whose validation "
        "score chose the rate. A searched arm ignores --set lr.",
        "",
    ]
    for (task, arm), record in records.items():
        scores = "; ".join(_probe_scores(record["probes"]))
        chosen = f"lr {record['lr']:g}" if "lr" in record else f"no rate chosen yet ({record['error']})"
        lines.append(f"- {arm} on {task}: {chosen}; probes: {scores}")
    return "\n".join(lines) + "\n"


def _probe_scores(probes: list[dict]) -> list[str]:
    """Each probe's rate and final validation score; where two scores print alike, every score to two
    more places and with its val loss (the tie-break), so the chosen rate never looks level with one it beat."""
    finals = [_probe_final(row) for row in probes]
    shown = [_score_text(final) for final in finals if final]
    tied = len(shown) > len(set(shown))
    texts = []
    for row, final in zip(probes, finals):
        rate = f"{float(row['lr']):g}"
        if final is None:
            texts.append(f"{rate}: {row.get('status', 'not run')}")
        elif tied:
            texts.append(f"{rate}: {_score_text(final, more=2)}, val loss {final['loss']:.4g}")
        else:
            texts.append(f"{rate}: {_score_text(final)}")
    return texts


def _probe_final(row: dict) -> dict | None:
    """A finished probe's final validation record (summary.json's `final`), None before it finished."""
    summary = RunDir(Path(row["run_dir"])).read_summary() if row.get("status") == "done" else None
    return summary["final"] if summary else None


def _score_text(final: dict, more: int = 0) -> str:
    metric = headline_metric(final)
    value = final[metric] if is_regression(final) else 100 * final[metric]
    # two decimals of accuracy: a rate can win by less than a tenth of a point (Bit Memory: 99.94 against 99.95)
    return f"{final['split']} {metric} {value:.{(3 if is_regression(final) else 2) + more}f}"


def own_rates(runs: list) -> set[tuple[str, str]]:
    """(task, arm) of each arm of `runs` (fpt.experiments.controls.ArmRun) trained at a rate of its own:
    searched (--lr-search: its runs lie in OUT/<task>-<arm>-lr); on a task with no arm searched, at
    another rate than fpt's runs had."""
    searched = {(r.task, r.arm) for r in runs if is_own_rate_run(r.path, r.arm)}
    fpt_rates: dict[str, set] = {}
    for run in runs:
        if run.arm == "fpt":
            fpt_rates.setdefault(run.task, set()).add(run.lr)
    unsearched = [r for r in runs if r.task in fpt_rates and r.task not in {task for task, _ in searched}]
    return searched | {(r.task, r.arm) for r in unsearched if r.lr not in fpt_rates[r.task]}


def task_order(runs: list) -> list[str]:
    """The tasks of `runs` in the order the table and the chart give them."""
    return list(dict.fromkeys(r.task for r in sorted(runs, key=lambda r: (CONTROL_ARMS.index(r.arm), r.task))))
