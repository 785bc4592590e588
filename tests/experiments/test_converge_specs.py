"""The converged runs' specs (benchmarks/specs/converge-*.yaml, run by `fpt sweep`) are what made
the committed run directories, and benchmarks/converge.py writes its tables from them."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from fpt.experiments.sweep_spec import load_spec

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"
RUNS = BENCHMARKS / "results" / "converge"
SPECS = sorted((BENCHMARKS / "specs").glob("converge-*.yaml"))


@pytest.fixture
def converge(monkeypatch):
    """benchmarks/converge.py as a module."""
    spec = importlib.util.spec_from_file_location("converge", BENCHMARKS / "converge.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "converge", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_each_cell_is_in_one_spec_and_its_run_directory_is_the_committed_one():
    names = [cell.name for path in SPECS for cell in load_spec(path).cells()]
    assert len(names) == len(set(names)) == 32
    for path in SPECS:
        spec = load_spec(path)
        assert spec.runs is not None and Path(spec.runs).resolve() == RUNS.resolve()
        assert spec.max_minutes is not None  # run in sittings: each one ends, checkpointed
    started = {p.name for p in RUNS.iterdir() if (p / "config.json").is_file()}
    assert started <= set(names)  # every committed run is a cell the specs would continue


def test_the_specs_options_are_those_the_committed_runs_were_started_with():
    """Every option a cell's spec gives equals its run's config.json, but for a field an older fpt
    did not record (recipe) and a target given after the run began (only a new run takes it)."""
    for path in SPECS:
        spec = load_spec(path)
        for cell in spec.cells():
            config_path = RUNS / cell.name / "config.json"
            if not config_path.is_file():
                continue
            config = json.loads(config_path.read_text())
            recorded = {**config, **config["task_options"]}
            for key, value in {**spec.options, **cell.values}.items():
                if key not in recorded or (key == "target_accuracy" and recorded[key] is None):
                    continue
                assert recorded[key] == value, (cell.name, key, recorded[key], value)


def test_converge_shows_every_spec_cell_with_its_spec_target_and_figure(converge):
    cells = converge.load_cells()
    assert list(cells)[:2] == ["mnist-fpt-paper-seed0", "mnist-random-paper-seed0"]  # the table's order
    assert cells["mnist-fpt-paper-seed0"].target == 98.0 and cells["mnist-random-paper-seed0"].target is None
    assert cells["listops-fpt-fast-seed0"].target == pytest.approx(38.4)
    assert cells["fashion-mnist-fpt-fast16k-dropout0-val5k-seed2"].figure == "fashion-mnist-val"
    assert cells["mnist-fpt-fast16k-dropout0-seed1"].seed == 1 and cells["bit-memory-fpt-paper-seed0"].recipe == "paper"


def test_a_cell_in_a_spec_but_not_shown_is_refused(converge, tmp_path):
    for path in SPECS:
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / "converge-extra.yaml").write_text("cells:\n  extra-seed0: {task: bit-xor}\n")
    with pytest.raises(SystemExit, match=r"in the specs but not in SHOWN: \['extra-seed0'\]"):
        converge.load_cells(tmp_path)


def test_the_tables_are_written_from_the_run_directories(converge, tmp_path, monkeypatch, capsys):
    """results.md: a row per started cell, its sittings counted from sittings.jsonl; a curve per figure."""
    copy = tmp_path / "converge"
    for run in RUNS.iterdir():
        if run.is_dir():
            (copy / run.name).mkdir(parents=True)
            for name in ("config.json", "metrics.jsonl", "summary.json", "sittings.jsonl"):
                if (run / name).is_file():
                    shutil.copy(run / name, copy / run.name / name)
    shutil.copy(BENCHMARKS / "results" / "recipe_speed.json", tmp_path / "recipe_speed.json")
    monkeypatch.setattr(converge, "ROOT", copy)
    monkeypatch.setattr(sys, "argv", ["converge.py"])
    assert converge.main() == 0
    text = (copy / "results.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| mnist-fpt-fast16k-dropout0-seed0 |")]
    sittings = len((RUNS / "mnist-fpt-fast16k-dropout0-seed0" / "sittings.jsonl").read_text().splitlines())
    assert sittings >= 1 and len(rows) == 1 and rows[0].endswith(f"| {sittings} |")
    assert {p.name for p in copy.glob("curves_*.png")} == {
        f"curves_{figure}.png" for figure in ("mnist", "fashion-mnist", "fashion-mnist-val", "listops", "bit-memory")
    }
