"""Sweeps: grids of runs, resumable, failures recorded, specs checked before anything runs."""

import csv
import dataclasses
import json
from pathlib import Path

import pytest

from fpt.cli import main
from fpt.core.errors import MISSING_BACKBONE, MISSING_BIT_BACKBONE, MISSING_DATA, SKIPPED, FptError
from fpt.experiments.paper import PAPER_VARIANTS
from fpt.experiments.report import write_sweep_report
from fpt.experiments.reproduce import Reproduction, run_reproduction
from fpt.experiments.sweep import run_sweep
from fpt.experiments.sweep_spec import load_spec
from fpt.experiments.tables import markdown_table
from fpt.training.config import RECIPES


def _spec(tmp_path, backbone, extra=""):
    path = tmp_path / "spec.yaml"
    path.write_text(f"""name: tiny
grid:
  task: [bit-xor]
  variant: [fpt, random]
  seed: [0, 1]
options:
  steps: 4
  eval_every: 2
  backbone: {backbone}
  eval_size: 16
parallel: 2
{extra}""")
    return path


def _rows(sweep_dir):
    with open(sweep_dir / "results.csv") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_sweep_runs_every_cell_writes_tables_and_never_reruns_a_finished_cell(tiny_gpt2, tmp_path, capsys):
    sweep_dir = tmp_path / "sweep"
    assert main(["sweep", str(_spec(tmp_path, tiny_gpt2)), "--out", str(sweep_dir), "--no-progress"]) == 0
    rows = _rows(sweep_dir)
    assert len(rows) == 4 and {r["status"] for r in rows} == {"done"}
    assert {(r["variant"], r["seed"]) for r in rows} == {("fpt", "0"), ("fpt", "1"), ("random", "0"), ("random", "1")}
    report = (sweep_dir / "results.md").read_text()
    assert "| variant=fpt |" in report and "(n=2)" in report
    assert (sweep_dir / "curves.png").read_bytes()[:4] == b"\x89PNG"
    config = json.loads((sweep_dir / "runs" / "task=bit-xor,variant=random,seed=1" / "config.json").read_text())
    assert config["init"] == "random" and config["seed"] == 1 and config["steps"] == 4
    # the cell ran from its config file, the TrainConfig as JSON, not from flags
    planned = json.loads((sweep_dir / "logs" / "task=bit-xor,variant=random,seed=1.config.json").read_text())
    assert planned["init"] == "random" and planned["seed"] == 1 and planned["threads"] >= 1
    asked = ("task", "backbone", "seed", "init", "policy", "steps", "eval_every", "lr", "recipe", "threads")
    assert {k: config[k] for k in asked} == {k: planned[k] for k in asked}  # the rest resolved by the run

    summaries = {p: p.stat().st_mtime_ns for p in sweep_dir.glob("runs/*/summary.json")}
    capsys.readouterr()
    assert main(["sweep", str(_spec(tmp_path, tiny_gpt2)), "--out", str(sweep_dir)]) == 0  # not a terminal
    assert summaries == {p: p.stat().st_mtime_ns for p in sweep_dir.glob("runs/*/summary.json")}
    ended = [line for line in capsys.readouterr().out.splitlines() if line.startswith("sweep tiny: ")]
    assert sorted(line.split()[2] for line in ended) == ["1/4", "2/4", "3/4", "4/4"]  # a line as each cell ends
    assert all(" done, accuracy " in line for line in ended)


@pytest.mark.slow
def test_a_killed_cell_is_resumed_from_its_checkpoint(tiny_gpt2, tmp_path):
    spec = load_spec(_spec(tmp_path, tiny_gpt2), PAPER_VARIANTS)
    sweep_dir = tmp_path / "sweep"
    run_sweep(spec, sweep_dir, progress=False)
    cell = sweep_dir / "runs" / "task=bit-xor,variant=fpt,seed=0"
    (cell / "summary.json").unlink()  # as if killed after its step-2 checkpoint... then finished
    rows = run_sweep(spec, sweep_dir, progress=False)
    assert all(r["status"] == "done" for r in rows)
    assert json.loads((cell / "summary.json").read_text())["resumed_from_step"] == 4


@pytest.mark.slow
def test_a_failing_cell_is_recorded_and_the_sweep_goes_on(tiny_gpt2, tmp_path):
    path = tmp_path / "spec.yaml"
    options = f"options:\n  steps: 2\n  backbone: {tiny_gpt2}\n  data_dir: {tmp_path / 'no-data'}\n"
    path.write_text("grid:\n  task: [bit-xor, mnist]\n" + options)
    with pytest.raises(FptError, match="cell task=bit-xor: task 'bit-xor' takes no option data_dir"):
        load_spec(path, PAPER_VARIANTS)  # an option a cell's task does not take: refused before any cell runs
    path.write_text("grid:\n  task: [mnist]\n  seed: [0, 1]\n" + options)
    rows = run_sweep(load_spec(path, PAPER_VARIANTS), tmp_path / "sweep", progress=False)
    assert [r["status"] for r in rows] == ["failed", "failed"] and all("no mnist data" in r["error"] for r in rows)
    # the kind of failure is recorded by the cell itself (failure.json), not read from its wording
    assert {r["failure"] for r in rows} == {MISSING_DATA}
    assert json.loads((Path(rows[0]["run_dir"]) / "failure.json").read_text())["kind"] == MISSING_DATA
    assert "data or weights not on this machine" in markdown_table(rows, "t", row_key="row")


@pytest.mark.slow
def test_a_sweep_with_a_failed_run_exits_1_naming_what_failed(tiny_gpt2, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FPT_CACHE_DIR", str(tmp_path / "cache"))  # no Bit backbone made here
    path = tmp_path / "spec.yaml"
    path.write_text(
        f"grid:\n  task: [bit-xor]\n  variant: [fpt, bit]\noptions:\n  steps: 2\n  eval_every: 2\n"
        f"  eval_size: 16\n  backbone: {tiny_gpt2}\n"
    )
    assert main(["sweep", str(path), "--out", str(tmp_path / "sweep"), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("fpt: 1 of 2 runs failed [no Bit backbone yet (fpt export-backbone): 1]")
    assert str(tmp_path / "sweep" / "results.md") in err
    assert {r["variant"]: r["status"] for r in _rows(tmp_path / "sweep")} == {"fpt": "done", "bit": "failed"}
    assert (
        main(
            [
                "reproduce",
                "table2",
                "--tasks",
                "bit-xor",
                "--budget",
                "2",
                "--seeds",
                "1",
                "--backbone",
                tiny_gpt2,
                "--skip-variants",
                "fpt,random,vit",
                "--set",
                "eval_size=8",
                "--out",
                str(tmp_path / "r"),
                "--no-progress",
            ]
        )
        == 1
    )  # skipped cells are not failures, nor counted as runs
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("fpt: 1 of 1 runs failed [no Bit backbone")


@pytest.mark.parametrize(
    "text, message",
    [
        ("grid:\n  task: [bit-xor]\nbogus: 1\n", "line 3: unknown key 'bogus'"),
        ("grid:\n  task: [bit-xor]\n  colour: [red]\n", "line 3: unknown grid key 'colour'"),
        ("grid:\n  task: [bit-xor, bit-nand]\n", "line 2: unknown task 'bit-nand'"),
        ("grid:\n  task: [bit-xor]\n  variant: [fpt, gpt5]\n", "line 3: unknown variant 'gpt5'"),
        ("options:\n  steps: 3\ngrid:\n  task: bit-xor\n", "line 4: grid values of 'task' must be a non-empty list"),
        ("grid: [1, 2\n", "not valid YAML"),
        (
            "grid:\n  seed: [0]\noptions:\n  task: bit-xor\n",
            "line 4: 'task' names the cells of a sweep; list it under grid",
        ),
        (
            "grid:\n  seed: [0, 1]\noptions:\n  steps: 1\n",
            "the grid names no task; list it there",
        ),  # ran, then a KeyError
    ],
)
def test_bad_specs_are_refused_naming_the_line_before_anything_runs(tmp_path, text, message, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(FptError, match=message.replace("[", r"\[").replace("(", r"\(")):
        load_spec(path, PAPER_VARIANTS)
    assert main(["sweep", str(path), "--out", str(tmp_path / "sweep")]) == 2
    assert not (tmp_path / "sweep").exists()


def test_reproduce_table_sits_beside_the_papers_numbers(tmp_path):
    plan = Reproduction(["table18"], budget=10, seeds=2)
    (_, spec, _), *_ = plan.sweeps()
    assert spec.options == {"steps": 10, "backbone": "minilm", "baselines": False} and spec.grid["seed"] == [0, 1]
    assert Reproduction(["table6"], budget=100).common_options()["eval_every"] == 5  # 20 evaluations a run
    by_epochs = Reproduction(["table18"], budget=10, options={"epochs": 2}).common_options()  # --set epochs=2
    assert by_epochs["epochs"] == 2 and "steps" not in by_epochs
    rows = [{"task": "bit-xor", "variant": "output+layernorm", "status": "done", "accuracy": a} for a in (0.9, 1.0)]
    rows.append(
        {
            "task": "cifar10",
            "variant": "output+layernorm",
            "status": "failed",
            "failure": MISSING_DATA,
            "error": "fpt: error: no cifar10 data at /x: run `fpt data get cifar10` or pass --data-dir DIR",
        }
    )
    table = markdown_table(rows, "t", "table18", "variant")
    assert "95.0 ± 7.1 (n=2) (paper 98)" in table
    assert "data or weights not on this machine (paper 54)" in table
    with pytest.raises(FptError, match="unknown table"):
        Reproduction(["table99"]).check()
    assert main(["reproduce", "table99", "--out", str(tmp_path / "r")]) == 2 and not (tmp_path / "r").exists()
    text = write_sweep_report(rows[:2], spec, tmp_path)
    assert "95.0" in text and "95.0" in (tmp_path / "results.md").read_text()


@pytest.mark.slow
def test_reproduce_shares_runs_between_tables_and_keeps_skipped_cells(tiny_gpt2, tmp_path):
    plan = Reproduction(
        ["table1", "table6"],
        tasks=["bit-xor"],
        budget=2,
        seeds=1,
        backbone=tiny_gpt2,
        skip_variants=("full", "lstm", "finetune"),
        options={"eval_size": 8},
    )
    rows, text = run_reproduction(plan, tmp_path / "r", progress=False)
    ran = [r for r in rows if r["status"] != "skipped"]
    assert sorted(r["variant"] for r in ran) == ["fpt", "random"]  # fpt once, for both tables
    assert all(r["status"] == "done" for r in ran), ran
    assert "| full | not run here: skipped for time (paper 100) |" in (tmp_path / "r" / "table1.md").read_text()
    assert (tmp_path / "r" / "table6.md").is_file() and "table6" in text


def test_a_variant_overrides_the_specs_options_and_a_grid_value_overrides_the_variant():
    from fpt.experiments.sweep_spec import train_args

    args = train_args({"backbone": "minilm", "steps": 5}, {"variant": "vit", "task": "mnist"}, PAPER_VARIANTS)
    assert args[args.index("--backbone") + 1] == "vit-base" and args.count("--backbone") == 1
    args = train_args({"backbone": "minilm"}, {"variant": "random", "init": "stats"}, PAPER_VARIANTS)
    assert args[args.index("--init") + 1] == "stats"
    args = train_args({"backbone": "minilm"}, {"variant": "lstm*-frozen"}, PAPER_VARIANTS)
    assert args[args.index("--model") + 1] == "lstm*-frozen"


def test_the_engine_takes_its_variants_from_the_caller(tmp_path):
    """A grid's `variant` means what the caller's Variants say: the engine has none of its own (issue 56)."""
    from fpt.experiments.sweep_spec import Variants, train_args

    path = tmp_path / "spec.yaml"
    path.write_text("grid:\n  task: [bit-xor, bit-memory]\n  variant: [tiny, fpt]\n")
    with pytest.raises(FptError, match="line 3: this sweep takes no variant"):
        load_spec(path)  # no variants given: the paper's are not looked up
    with pytest.raises(FptError, match="line 3: unknown variant 'tiny'"):
        load_spec(path, PAPER_VARIANTS)
    mine = Variants({"tiny": {"steps": 3, "lr": 0.5}, "fpt": {"policy": "fpt"}}, {("tiny", "bit-memory"): {"steps": 7}})
    spec = load_spec(path, mine)
    assert [spec.cell_options(c.values) for c in spec.cells()] == [
        {"task": "bit-xor", "steps": 3, "lr": 0.5},
        {"task": "bit-xor", "policy": "fpt"},
        {"task": "bit-memory", "steps": 7, "lr": 0.5},
        {"task": "bit-memory", "policy": "fpt"},
    ]
    assert "variants" not in spec.as_dict()  # spec.json as before; each cell's record holds its options
    assert train_args({}, {"variant": "tiny"}, mine) == ["--steps", "3", "--lr", "0.5"]


def test_a_cells_config_is_its_options_as_fpt_train_makes_them():
    """The TrainConfig a cell's process is given (as JSON): the variant applied, the task's options apart,
    an option set to null left to the recipe as an unset flag is, the sitting's threads in it."""
    from fpt.experiments.sweep_spec import SweepSpec, cell_config

    options = {"recipe": "fast", "lr": None, "n_bits": 4, "steps": 300}
    spec = SweepSpec("s", {"task": ["bit-xor"], "variant": ["random"]}, options, variants=PAPER_VARIANTS)
    config = cell_config(spec, spec.cells()[0].values, threads=2)
    assert (config.init, config.policy, config.lr, config.recipe) == ("random", "fpt", RECIPES["fast"]["lr"], "fast")
    assert (config.task, config.task_options, config.steps, config.threads) == ("bit-xor", {"n_bits": 4}, 300, 2)


def test_spec_wide_transformer_options_skip_baseline_cells_only():
    from fpt.experiments.sweep_spec import train_args

    options = {"precision": "bf16", "checkpointing": True, "steps": 5}
    fpt_args = train_args(options, {"variant": "random"}, PAPER_VARIANTS)
    assert fpt_args[fpt_args.index("--precision") + 1] == "bf16" and "--checkpointing" in fpt_args
    lstm_args = train_args(options, {"variant": "lstm"}, PAPER_VARIANTS)
    assert "--precision" not in lstm_args and "--checkpointing" not in lstm_args and "--steps" in lstm_args
    # asked for in the cell itself, it is kept, and `fpt train` refuses it with its own clear error
    lstm_args = train_args({}, {"model": "lstm", "precision": "bf16"}, PAPER_VARIANTS)
    assert lstm_args[lstm_args.index("--precision") + 1] == "bf16"


def test_reproduce_can_be_restricted_to_some_tasks():
    sweeps = Reproduction(["table1"], tasks=["bit-xor", "mnist"], budget=10, seeds=1).sweeps()
    assert [folder for folder, _, _ in sweeps] == ["bit-xor", "mnist"]
    assert all(spec.grid["variant"] == ["fpt", "full", "lstm", "finetune"] for _, spec, _ in sweeps)
    with pytest.raises(FptError, match="table12 has no task mnist"):
        Reproduction(["table12"], tasks=["mnist"]).check()
    with pytest.raises(FptError, match="--skip-variants: unknown variant gpt5"):
        Reproduction(["table1"], skip_variants=("gpt5",)).check()


def test_cells_say_why_a_variant_could_not_run():
    rows = [
        {"task": "bit-xor", "variant": "bit", "status": "failed", "failure": MISSING_BIT_BACKBONE, "error": "..."},
        {"task": "bit-xor", "variant": "vit", "status": "failed", "failure": MISSING_BACKBONE, "error": "..."},
        {"task": "bit-xor", "variant": "random", "status": "failed", "failure": "usage", "error": "loss became nan"},
        {"task": "bit-xor", "variant": "fpt", "status": "skipped", "failure": SKIPPED, "error": "skipped"},
    ]
    table = markdown_table(rows, "t", "table2", "variant")
    assert "| fpt | not run here: skipped for time (paper 100) |" in table
    assert "| bit | no Bit backbone yet (fpt export-backbone) (paper 100) |" in table
    assert "| vit | data or weights not on this machine (paper 100) |" in table
    assert "| random | failed (paper 100) |" in table


def test_cells_whose_values_differ_never_share_a_run_directory():
    from fpt.experiments.sweep_spec import Cell

    # unsafe characters used to become "_": these two shared one directory, the second never trained
    a, b = Cell({"task": "npz:/d/data/a.npz"}), Cell({"task": "npz:/d/data_a.npz"})
    assert a.name != b.name and "/" not in a.name + b.name
    assert Cell({"task": "bit-xor", "seed": 0}).name == "task=bit-xor,seed=0"  # plain values read as they are
    assert Cell({"x": "1,y=2"}).name != Cell({"x": 1, "y": 2}).name
    assert len(Cell({"data_dir": "d" * 1000}).name) < 140


def test_duplicate_cells_are_refused_when_the_spec_loads(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("grid:\n  task: [bit-xor]\n  seed: [0, 0]\n")
    with pytest.raises(FptError, match="twice"):
        load_spec(path, PAPER_VARIANTS)


@pytest.mark.slow
def test_a_sweep_rerun_with_other_options_is_refused_before_anything_runs(tiny_gpt2, tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(f"grid:\n  task: [bit-xor]\noptions:\n  steps: 2\n  eval_size: 8\n  backbone: {tiny_gpt2}\n")
    rows = run_sweep(load_spec(path, PAPER_VARIANTS), tmp_path / "sweep", progress=False)
    assert rows[0]["status"] == "done"
    path.write_text(f"grid:\n  task: [bit-xor]\noptions:\n  steps: 3\n  eval_size: 8\n  backbone: {tiny_gpt2}\n")
    with pytest.raises(FptError, match="was run with other options.*--steps"):
        run_sweep(load_spec(path, PAPER_VARIANTS), tmp_path / "sweep", progress=False)
    assert main(["sweep", str(path), "--out", str(tmp_path / "sweep")]) == 2
    record = next((tmp_path / "sweep" / "cells").glob("*.json"))
    for damaged in ("{", "[]", '{"args": 5}', '{"args": ["--steps"], "recipe": 3}'):
        record.write_text(damaged)
        with pytest.raises(FptError, match="not a cell's record.*delete"):
            run_sweep(load_spec(path, PAPER_VARIANTS), tmp_path / "sweep", progress=False)


@pytest.mark.slow
def test_a_sweep_whose_recipe_was_redefined_since_its_cells_ran_is_refused(tiny_gpt2, tmp_path, monkeypatch):
    path = tmp_path / "spec.yaml"
    path.write_text(
        f"grid:\n  task: [bit-xor]\noptions:\n  recipe: fast\n  precision: fp32\n  steps: 2\n"
        f"  warmup_steps: 1\n  eval_size: 8\n  backbone: {tiny_gpt2}\n"
    )
    assert run_sweep(load_spec(path, PAPER_VARIANTS), tmp_path / "sweep", progress=False)[0]["status"] == "done"
    monkeypatch.setitem(RECIPES, "fast", {**RECIPES["fast"], "dropout": 0.5})  # an upgrade of fpt, say
    with pytest.raises(FptError, match=r"earlier --recipe fast \(dropout 0.0 -> 0.5\)"):
        run_sweep(load_spec(path, PAPER_VARIANTS), tmp_path / "sweep", progress=False)
    monkeypatch.undo()
    # a cell recorded when the fast recipe's precision was named native-bf16 (now auto: the same pick)
    record = next((tmp_path / "sweep" / "cells").glob("*.json"))
    recorded = json.loads(record.read_text())
    record.write_text(json.dumps({**recorded, "recipe": {**recorded["recipe"], "precision": "native-bf16"}}))
    assert run_sweep(load_spec(path, PAPER_VARIANTS), tmp_path / "sweep", progress=False)[0]["status"] == "done"


def test_local_cells_split_the_cores_this_process_may_use_not_every_core(tmp_path, monkeypatch):
    import fpt.core.runtime
    import fpt.experiments.sweep as sweep

    # taskset, Slurm and container cpusets narrow the affinity: a sweep pinned to one core of
    # a shared machine must not start a thread per core of the machine in each cell.
    monkeypatch.setattr(fpt.core.runtime.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(fpt.core.runtime.os, "sched_getaffinity", lambda pid: {3, 5}, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    threads = []
    monkeypatch.setattr(
        sweep, "run_cell", lambda cell, spec, sweep_dir, n, tracking, stop: threads.append(n) or {"status": "done"}
    )
    spec = dataclasses.replace(load_spec(_spec(tmp_path, "unused"), PAPER_VARIANTS), parallel=1)
    list(sweep.LocalExecutor()(spec.cells()[:2], spec, tmp_path))
    assert threads == [2, 2]
    # OMP_NUM_THREADS caps them (make test sets 1 for its pytest -n auto workers: a cell with every
    # core would spin against the other worker); a cap above the cores or not a count leaves the cores
    for value, expected in (("1", 1), (" 1", 1), ("1,4", 1), ("16", 2), ("auto", 2), ("0", 2), ("\u00b2", 2)):
        monkeypatch.setenv("OMP_NUM_THREADS", value)
        threads.clear()
        list(sweep.LocalExecutor()(spec.cells()[:1], spec, tmp_path))
        assert threads == [expected], value


def test_a_cell_run_with_the_baselines_is_the_same_cell_without_them(tiny_gpt2, tmp_path):
    """The baselines are reported beside a run's score and change nothing it trains or scores: a
    reproduction begun when its cells scored them continues under one that leaves them out."""
    from fpt.experiments.cell_records import check_cells_unchanged, write_cell_records

    path = tmp_path / "spec.yaml"
    path.write_text(f"grid:\n  task: [bit-xor]\noptions:\n  steps: 2\n  backbone: {tiny_gpt2}\n  baselines: true\n")
    write_cell_records(load_spec(path, PAPER_VARIANTS), tmp_path / "sweep")
    path.write_text(f"grid:\n  task: [bit-xor]\noptions:\n  steps: 2\n  backbone: {tiny_gpt2}\n  baselines: false\n")
    check_cells_unchanged(load_spec(path, PAPER_VARIANTS), tmp_path / "sweep")  # not refused
    path.write_text(f"grid:\n  task: [bit-xor]\noptions:\n  steps: 3\n  backbone: {tiny_gpt2}\n")
    with pytest.raises(FptError, match="was run with other options \\(--steps 2 -> 3\\)"):
        check_cells_unchanged(load_spec(path, PAPER_VARIANTS), tmp_path / "sweep")
