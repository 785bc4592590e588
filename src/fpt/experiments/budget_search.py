"""`fpt reproduce m3 --budget-search 1000,3000`: each subset's training budget, chosen on validation.

benchmarks/m3_fpt.py's protocol for the committed M3 results: on each subset, fpt's seed 0 trains once
per budget (the "probes", under OUT/budget-probes/<subset>/, which no table reads), and the budget
whose run ends with the lowest sMAPE on the validation split (the horizon before each series' test,
never the test; ties: the lower budget) is the budget of every arm and seed on that subset. The
choice is made again from the probes' files each time the command runs: a finished probe is never
trained again, so it is the same choice. A probe that failed leaves its subset unchosen (and unrun)
until it is fixed and the command run again.
"""

from __future__ import annotations

from pathlib import Path

from fpt.core.errors import FptError
from fpt.experiments.paper import COLLECTION_TABLES, CONTROL_ARMS, PAPER_VARIANTS
from fpt.experiments.sweep_spec import SweepSpec
from fpt.training.run_dir import RunDir

BUDGET_PROBES = "budget-probes"  # OUT/budget-probes/<subset folder>/: the runs a budget was chosen from


def parse_budget_search(text: str | None) -> list[int]:
    """ "1000,3000" -> [1000, 3000]; one clear line for anything else (fewer than two different
    budgets, one below 1, a word)."""
    if not text:
        return []
    try:
        budgets = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        budgets = []
    if len(budgets) < 2 or len(set(budgets)) < len(budgets) or min(budgets) < 1:
        raise FptError(f"--budget-search takes two or more different step counts, e.g. 1000,3000; got {text[:40]!r}")
    return budgets


def check_budget_search(tables: list[str], options: dict, skipped: tuple[str, ...]) -> None:
    """Refuse --budget-search for tables other than the collections', beside --set steps, or with no arm left."""
    if any(t not in COLLECTION_TABLES for t in tables):
        raise FptError(f"--budget-search is for the {' and '.join(COLLECTION_TABLES)} tables alone")
    if "steps" in options:
        raise FptError("--budget-search chooses the steps: leave out --set steps")
    if not [v for v in CONTROL_ARMS if v not in skipped]:
        raise FptError("--budget-search needs an arm to probe; every arm is in --skip-variants")


def probe_spec(name: str, task: str, arm: str, cells: dict[int, dict], options: dict, parallel: int) -> SweepSpec:
    """Seed 0 of `arm` once per budget (`cells`: budget -> the options that budget sets), named
    ARM-stepsB, with every other option the arm's cells have."""
    named = {f"{arm}-steps{b}": {"task": task, "variant": arm, "seed": 0, **values} for b, values in cells.items()}
    return SweepSpec(name, {}, options, parallel, named, variants=PAPER_VARIANTS)


def validation_smape(run_dir: Path) -> float | None:
    """A finished probe's sMAPE on the validation split at its end; None before it finished."""
    summary = RunDir(run_dir).read_summary()
    if summary is None:
        return None
    final = summary["final"]
    if final.get("split", "").partition("[")[0] != "val" or "smape" not in final:
        raise FptError(f"--budget-search chooses on validation sMAPE, and {run_dir} ended on {final.get('split')}")
    return float(final["smape"])


def choose_budget(rows: list[dict], budgets: list[int]) -> dict:
    """{"steps": the chosen budget, "val_smape": {budget: its probe's val sMAPE}} from the probes' rows
    (in `budgets`' order), or {"error": why} where a probe failed or has not finished."""
    scores = {}
    for budget, row in zip(budgets, rows):
        value = validation_smape(Path(row["run_dir"])) if row.get("status") == "done" else None
        if value is None:
            return {"error": f"the probe of {budget} steps did not finish ({row.get('error') or 'not finished'})"}
        scores[budget] = value
    return {"steps": min(budgets, key=lambda b: (scores[b], b)), "val_smape": scores}


def budget_section(choices: dict[str, dict]) -> str:
    """What the table says under it about each subset's budget (task -> choose_budget's answer)."""
    if not choices:
        return ""
    lines = [
        "",
        "Budgets chosen on validation (--budget-search): on each subset the first arm's seed 0 trained once "
        "per budget (OUT/budget-probes/), and the lowest validation sMAPE at its end (ties: the fewer steps) "
        "chose the budget every arm and seed then trained with.",
        "",
    ]
    for task, choice in choices.items():
        if "steps" in choice:
            tried = "; ".join(f"{b:,} steps: {v:.2f}" for b, v in choice["val_smape"].items())
            lines.append(f"- {task}: {choice['steps']:,} steps (val sMAPE {tried})")
        else:
            lines.append(f"- {task}: no budget chosen yet, so not run: {choice['error']}")
    return "\n".join(lines) + "\n"


def read_choices(root: Path) -> dict[str, dict]:
    """The choice each subset's probes under ROOT/budget-probes/ make (task -> choose_budget's answer),
    read from their run files alone: what `fpt competitions` says under a
    table rebuilt from committed files."""
    found: dict[str, dict[int, Path]] = {}
    for config in sorted((Path(root) / BUDGET_PROBES).glob(f"*/runs/*/{RunDir.CONFIG}")):
        values = RunDir(config.parent).read_config()
        found.setdefault(str(values["task"]), {})[int(values["steps"])] = config.parent
    choices = {}
    for task, runs in found.items():
        budgets = sorted(runs)
        rows = [{"status": "done", "run_dir": str(runs[b])} if RunDir(runs[b]).is_finished else {} for b in budgets]
        choices[task] = choose_budget(rows, budgets)
    return choices
