"""Every table by name, the file each lives in, and the markers it sits between there: how
benchmarks/readme_tables.py renders, checks and writes the tables. Writes no table itself."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Callable

from .budgets import (
    bit_memory_budget_table,
    bit_xor_budget_table,
    listops_budget_table,
    mnist_budget_table,
    paper_tables_images,
    paper_tables_xor,
)
from .controls import (
    CONTROLS_CHART,
    controls_chart_is_current,
    controls_full_rate_table,
    controls_head_table,
    controls_table,
    draw_controls_chart,
)
from .converged import converged_table, table6_mnist, table6_xor
from .headline import headline_table
from .m3 import m3_controls_table, m3_intervals_table, m3_table, tourism_table
from .precision import int8_step_table, int8_table, time_to_accuracy_table
from .recipes import (
    dropout_probe_table,
    lr_probe_table,
    recipe_search_table,
    recipes_table,
    small_data_test_table,
    small_data_validation_table,
    ucr_budget_table,
    ucr_budget_test_table,
)
from .results_index import results_index_table
from .speed import compile_table, data_parallel_table, memory_table, speed_listops_table, speed_table, startup_table
from .time_series import forecasting_table, ucr_patching_table, ucr_table, uea_table


def _results_index() -> str:
    """The index of benchmarks/results/: every other table is rendered again while the files it opens are noted."""
    return results_index_table({name: table for name, table in TABLES.items() if name != "results-index"}, HOMES)


TABLES: dict[str, Callable[[], str]] = {
    "headline": headline_table,
    "converged": converged_table,
    "table6-mnist": table6_mnist,
    "recipes": recipes_table,
    "speed": speed_table,
    "speed-listops": speed_listops_table,
    "startup": startup_table,
    "ucr-patching": ucr_patching_table,
    "compile": compile_table,
    "int8": int8_table,
    "int8-step": int8_step_table,
    "time-to-accuracy": time_to_accuracy_table,
    "memory": memory_table,
    "listops-budget": listops_budget_table,
    "bit-memory-budget": bit_memory_budget_table,
    "mnist-budget": mnist_budget_table,
    "bit-xor-budget": bit_xor_budget_table,
    "data-parallel": data_parallel_table,
    "paper-tables-xor": paper_tables_xor,
    "paper-tables-images": paper_tables_images,
    "recipe-search": recipe_search_table,
    "dropout-probe": dropout_probe_table,
    "lr-probe": lr_probe_table,
    "small-data-validation": small_data_validation_table,
    "small-data-test": small_data_test_table,
    "ucr-budget": ucr_budget_table,
    "ucr-budget-test": ucr_budget_test_table,
    "table6-xor": table6_xor,
    "forecasting": forecasting_table,
    "uea": uea_table,
    "ucr": ucr_table,
    "controls": controls_table,
    "controls-head": controls_head_table,
    "controls-full-rate": controls_full_rate_table,
    "m3": m3_table,
    "m3-controls": m3_controls_table,
    "m3-intervals": m3_intervals_table,
    "tourism": tourism_table,
    "results-index": _results_index,
}


# --- where each table lives ----------------------------------------------------------------------

# The front page carries only the headline; every other table sits in the benchmarks page of its topic,
# beside the notes that explain it (benchmarks/README.md is their one-screen summary and holds none).
# Paths are relative to the repository root (--root in the tests).
FRONT = "README.md"
PAGES: dict[str, tuple[str, ...]] = {
    FRONT: ("headline",),
    "benchmarks/converged.md": ("converged", "table6-mnist", "recipes"),
    "benchmarks/forecasting.md": (
        "forecasting",
        "uea",
        "ucr-patching",
        "ucr",
        "m3",
        "m3-controls",
        "m3-intervals",
        "tourism",
    ),
    "benchmarks/controls.md": ("controls", "controls-head", "controls-full-rate"),
    "benchmarks/recipes.md": (
        "recipe-search",
        "dropout-probe",
        "lr-probe",
        "small-data-validation",
        "small-data-test",
        "ucr-budget",
        "ucr-budget-test",
    ),
    "benchmarks/early-training.md": (
        "bit-xor-budget",
        "bit-memory-budget",
        "mnist-budget",
        "listops-budget",
        "paper-tables-xor",
        "table6-xor",
        "paper-tables-images",
    ),
    "benchmarks/speed.md": (
        "memory",
        "speed",
        "compile",
        "int8",
        "int8-step",
        "time-to-accuracy",
        "speed-listops",
        "data-parallel",
        "startup",
    ),
    "benchmarks/results-index.md": ("results-index",),
}
HOMES = {name: home for home, names in PAGES.items() for name in names}
if set(HOMES) != set(TABLES):  # a table without a page, or a page naming a table that does not exist
    raise SystemExit(f"tablegen/homes.py: PAGES and TABLES disagree on {sorted(set(HOMES) ^ set(TABLES))}")
# a table's picture, drawn from the same files whenever the table is written: where it lies, how it is
# drawn, and whether a picture there was drawn from the files as they are
CHARTS: dict[str, tuple[str, Callable[[Path], None], Callable[[Path], bool]]] = {
    "controls": (CONTROLS_CHART, draw_controls_chart, controls_chart_is_current)
}


def _pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- table:{re.escape(name)} -->\n)(.*?)(<!-- /table:{re.escape(name)} -->)", re.S)


def render(names=None) -> dict[str, str]:
    return {name: TABLES[name]().rstrip("\n") + "\n" for name in (names or TABLES)}


def by_home(tables: dict[str, str]) -> dict[str, dict[str, str]]:
    """{file: {table: text}} for the files these tables live in."""
    homes: dict[str, dict[str, str]] = {}
    for name, table in tables.items():
        homes.setdefault(HOMES[name], {})[name] = table
    return homes


def differences(text: str, tables: dict[str, str]) -> list[str]:
    """The tables whose text in `text` (the file they live in) is not what the files give, each with why."""
    found = []
    for name, table in tables.items():
        match = _pattern(name).search(text)
        if match is None:
            found.append(f"{name}: no <!-- table:{name} --> ... <!-- /table:{name} --> markers in {HOMES[name]}")
        elif match.group(2) != table:
            found.append(f"{name}: differs from what the files give")
    return found


def update(text: str, tables: dict[str, str]) -> str:
    for name, table in tables.items():
        pattern = _pattern(name)
        if pattern.search(text) is None:
            raise SystemExit(
                f"{HOMES[name]} has no markers for table {name!r}: put <!-- table:{name} --> and "
                f"<!-- /table:{name} --> on lines of their own where it belongs"
            )
        text = pattern.sub(lambda m: m.group(1) + table + m.group(3), text, count=1)
    return text


def strays(root: Path) -> list[str]:
    """Markers of a table in a file it does not live in: the script would never rewrite them."""
    found = []
    for home in PAGES:
        text = (root / home).read_text()
        found += [
            f"{name}: markers in {home}, but the table lives in {HOMES[name]}"
            for name in TABLES
            if HOMES[name] != home and f"<!-- table:{name} -->" in text
        ]
    return found


def untracked_runs(results: Path) -> list[str]:
    """The run files under `results` (summary.json, metrics.jsonl) that git does not track.

    The tables read every run folder there, tracked or not: a table written from an unfinished sweep
    or an uncommitted run quotes figures no clone has (it happened once). Ignored files count too: a
    sweep's runs/ folders are ignored by .gitignore and committed with `git add -f`. Empty outside a
    checkout or without git.
    """
    try:
        listing = subprocess.run(
            ["git", "ls-files", "--others", "--", "."], cwd=results, capture_output=True, text=True
        )
    except OSError:  # no git on this machine: nothing to compare with
        return []
    if listing.returncode != 0:
        return []
    names = [name for name in listing.stdout.splitlines() if Path(name).name in ("summary.json", "metrics.jsonl")]
    return sorted(str(results / name) for name in names)


def charts_of(homes: dict[str, dict[str, str]]) -> list[tuple[str, tuple]]:
    """The pictures of the tables being written or checked."""
    return [(name, CHARTS[name]) for tables in homes.values() for name in tables if name in CHARTS]
