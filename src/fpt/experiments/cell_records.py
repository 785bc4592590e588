"""A sweep's cell records (SWEEP/cells/NAME.json): the `fpt train` arguments and the recipe each cell
ran with, so that running a sweep again under other options, or under another fpt's definition of
its recipe, is refused rather than mixing old results with new ones."""

from __future__ import annotations

import json
from pathlib import Path

from fpt.core.errors import FptError
from fpt.core.paths import write_json
from fpt.experiments.sweep_spec import Cell, SweepSpec, train_args
from fpt.training.run_dir import RunDir


def cell_run(sweep_dir: Path, cell: Cell) -> RunDir:
    """The cell's run directory: in the spec's `runs` folder where it names one, else SWEEP_DIR/runs."""
    return RunDir(Path(cell.runs or sweep_dir / "runs") / cell.name)


def write_cell_records(spec: SweepSpec, sweep_dir: Path) -> None:
    """The options each cell runs with, to compare when the sweep is run again."""
    for cell in spec.cells():
        args = train_args(spec.options, cell.values, spec.variants)
        write_json(cell_record(sweep_dir, cell), {"values": cell.values, "args": args, "recipe": recipe_of(args)})


def cell_record(sweep_dir: Path, cell: Cell) -> Path:
    """The options a cell ran with, kept beside its run: a spec's `runs:` folder is found from any
    --out or working directory, and so must the record that guards it be."""
    return (Path(cell.runs) if cell.runs else sweep_dir) / "cells" / f"{cell.name}.json"


def recipe_of(args: list[str]) -> dict:
    """What the cell's --recipe sets, as this fpt defines it (unresolved: the same on every machine)."""
    from fpt.training.config import RECIPES

    name = train_flags(args).get("--recipe", "paper")
    return {"name": name, **RECIPES.get(name, {})}


def _renamed_recipe_values(recipe: dict | None) -> dict | None:
    """A recorded recipe in today's words: the fast recipe's precision "native-bf16" (bf16 where the
    CPU computes it natively, else fp32) is what --precision auto picks on a CPU, and is now named so."""
    if recipe is None or recipe.get("precision") != "native-bf16":
        return recipe
    return {**recipe, "precision": "auto"}


def check_cells_unchanged(spec: SweepSpec, sweep_dir: Path) -> None:
    """A cell run before with other options would report old results under the new spec: refuse.
    So is one run under another definition of its recipe (an fpt upgrade mid-sweep), which would
    mix its cells run before with those run after."""
    for cell in spec.cells():
        record = cell_record(sweep_dir, cell)
        if not record.is_file():
            continue
        redo = f"delete {record} and {cell_run(sweep_dir, cell).path} to run the cell again"
        try:
            recorded = json.loads(record.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            recorded = None
        before = recorded.get("args") if isinstance(recorded, dict) else None
        if not (
            isinstance(before, list)
            and all(isinstance(arg, str) for arg in before)
            and isinstance(recorded.get("recipe"), (dict, type(None)))
        ):
            raise FptError(f"{record} is not a cell's record (JSON with args and recipe); {redo}")
        now, before = _scored_alike(train_args(spec.options, cell.values, spec.variants)), _scored_alike(before)
        recipe_then, recipe_now = _renamed_recipe_values(recorded.get("recipe")), recipe_of(now)
        if recipe_then is not None and before == now and recipe_then != recipe_now:
            changed = _differences(recipe_then, recipe_now)
            raise FptError(
                f"cell {cell.name} in {sweep_dir} ran under an earlier --recipe {recipe_now['name']} "
                f"({changed}); give the old values in the spec's options to finish it, or use another --out"
            )
        if before != now:
            changed = _differences(train_flags(before or []), train_flags(now))
            raise FptError(
                f"cell {cell.name} in {sweep_dir} was run with other options ({changed or 'reordered'}); "
                f"use another --out, or {redo}"
            )


# Options that change what a run reports beside its score, not what it trains or scores: a cell run with
# or without them is the same cell (`fpt reproduce` turned the baselines off in cells run before with them)
REPORTED_BESIDE = ("--baselines", "--no-baselines")


def _scored_alike(args: list) -> list:
    return [arg for arg in args if arg not in REPORTED_BESIDE]


def _differences(old: dict, new: dict) -> str:
    """'key old -> new' for every key whose value differs, '(unset)' where one side lacks it."""
    return ", ".join(
        f"{key} {old.get(key, '(unset)')} -> {new.get(key, '(unset)')}"
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key)
    )


def train_flags(args: list[str]) -> dict[str, str]:
    """["--steps", "2", "--compile"] -> {"--steps": "2", "--compile": "on"}"""
    flags, i = {}, 0
    while i < len(args):
        value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
        flags[args[i]] = "on" if value is None else value
        i += 1 if value is None else 2
    return flags
