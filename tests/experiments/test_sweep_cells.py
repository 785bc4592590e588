"""Named cells, a spec's own runs folder and time-limited sittings: what `fpt sweep` runs the
converged cells with (benchmarks/specs/converge-*.yaml)."""

import csv
import json

import pytest
import torch
from helpers import one_line_error

from fpt.cli import main
from fpt.core.errors import FptError
from fpt.experiments.sittings import read_sittings
from fpt.experiments.sweep import STOPPED, run_cell, run_sweep
from fpt.experiments.sweep_spec import load_spec
from fpt.training.checkpoint import load_checkpoint
from fpt.training.run_dir import RunDir
from fpt.training.speed import SPEED_KEYS


def _named_spec(tmp_path, backbone, extra="", name="timed"):
    path = tmp_path / "specs" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"""name: {name}
runs: ../results
options: {{n_bits: 4, eval_size: 8, batch_size: 4, backbone: {backbone}, steps: 3, eval_every: 1}}
cells:
  xor-seed0: {{task: bit-xor, seed: 0}}
{extra}""")
    return path


def test_named_cells_load_in_order_with_their_own_options_and_a_runs_folder_beside_the_spec(tmp_path):
    path = tmp_path / "specs" / "named.yaml"
    path.parent.mkdir()
    path.write_text(
        "runs: ../results\nmax_minutes: 1e-3\noptions: {steps: 8}\ncells:\n"
        "  b-seed1: {task: bit-xor, seed: 1, lr: 1e-3}\n  a-seed0: {task: bit-memory, seed: 0, steps: 4}\n"
    )
    spec = load_spec(path)
    cells = spec.cells()
    assert [c.name for c in cells] == ["b-seed1", "a-seed0"]  # the spec's order, the names as given
    assert cells[0].values == {"task": "bit-xor", "seed": 1, "lr": 0.001}  # 1e-3, text in YAML 1.1, is a number
    assert spec.options == {"steps": 8} and cells[1].values["steps"] == 4
    assert cells[0].runs == str(tmp_path / "results") and spec.max_minutes == 0.001
    assert spec.as_dict()["runs"] == str(tmp_path / "results")


def test_a_grid_specs_record_keeps_the_keys_it_always_had(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("grid:\n  task: [bit-xor]\n")
    spec = load_spec(path)
    assert set(spec.as_dict()) == {"name", "grid", "options", "parallel"} and spec.cells()[0].runs is None


@pytest.mark.parametrize(
    "text, words",
    [
        ("grid: {task: [bit-xor]}\ncells: {a: {task: bit-xor}}\n", "give 'grid' or 'cells', not both"),
        ("cells: [bit-xor]\n", "'cells' must map each cell's name to its options"),
        ("cells:\n  a: {seed: 0}\n", "line 2: cell a must map option names to values, task included"),
        ("cells:\n  ../up: {task: bit-xor}\n", "line 2: cell name '../up' is not a plain directory name"),
        ("cells:\n  a: {task: bit-xor, seed: [0, 1]}\n", "cell a's 'seed' is one value, not a list"),
        ("cells:\n  a: {task: bit-xor, colour: red}\n", "unknown key 'colour' of cell a"),
        ("cells:\n  a: {task: bit-nand}\n", "line 2: unknown task 'bit-nand'"),
        ("cells:\n  a: {task: bit-xor, lr: -1}\n", "cell a: --lr must be a positive number"),
        ("cells:\n  a: {task: bit-xor}\nmax_minutes: 0\n", "'max_minutes' must be a positive number of minutes"),
        ("cells:\n  a: {task: bit-xor}\nmax_minutes: soon\n", "'max_minutes' must be a positive number"),
        ("cells:\n  a: {task: bit-xor}\nmax_minutes: .inf\n", "'max_minutes' must be a positive number"),
        ("cells:\n  a: {task: bit-xor}\nruns: 3\n", "'runs' must be a folder's path"),
        ("<<: {cells: {a: {task: bit-xor}}}\n", "write 'cells' as a key of the spec itself"),
    ],
)
def test_bad_named_cells_and_sitting_keys_are_refused_in_one_line(tmp_path, capsys, text, words):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(FptError, match=words.replace("[", r"\[").replace("(", r"\(").replace(".", r"\.")):
        load_spec(path)
    assert main(["sweep", str(path), "--out", str(tmp_path / "sweep")]) == 2
    assert words in one_line_error(capsys) and not (tmp_path / "sweep").exists()


def test_a_begun_run_in_the_specs_folder_without_a_checkpoint_is_kept_not_cleared(tmp_path):
    """A sweep clears a cell killed before its first checkpoint in its own folder; in a spec's `runs`
    folder (committed runs) it refuses, naming the fix, and touches nothing."""
    spec = load_spec(_named_spec(tmp_path, "gpt2"))
    run = tmp_path / "results" / "xor-seed0"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"steps": 3}))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "split": "heldout", "accuracy": 0.5}) + "\n")
    row = run_cell(spec.cells()[0], spec, tmp_path / "sweep", threads=1)
    assert row["status"] == "failed" and "has no checkpoint to resume; move it aside" in row["error"]
    assert sorted(p.name for p in run.iterdir()) == ["config.json", "metrics.jsonl"]


def _metrics(run):
    """A run's evaluations less their wall-clock times."""
    timings = {"elapsed_s", "time", *SPEED_KEYS}
    return [{k: v for k, v in r.items() if k not in timings} for r in RunDir(run).read_metrics()]


@pytest.mark.slow
def test_sittings_cut_short_by_max_minutes_continue_to_the_uninterrupted_runs_end(tiny_gpt2, tmp_path, capsys):
    """Each sitting of 1e-6 minutes trains one step and stops with a checkpoint (a row "stopped",
    exit 0); the next `fpt sweep` continues it; three sittings end where one uninterrupted run does,
    bit for bit, and every sitting is logged in the run directory."""
    straight = tmp_path / "straight"
    assert (
        run_sweep(load_spec(_named_spec(straight, tiny_gpt2)), straight / "sweep", progress=False)[0]["status"]
        == "done"
    )
    timed = _named_spec(tmp_path, tiny_gpt2, "max_minutes: 1.0e-6\n")
    run = tmp_path / "results" / "xor-seed0"
    for sitting in (1, 2):
        assert main(["sweep", str(timed), "--out", str(tmp_path / "sweep"), "--no-progress"]) == 0
        with open(tmp_path / "sweep" / "results.csv") as handle:
            (row,) = csv.DictReader(handle)
        assert row["status"] == STOPPED and row["step"] == str(sitting) and not RunDir(run).is_finished
        err = capsys.readouterr().err
        assert "1 of 1 runs stopped at max_minutes 1e-06" in err and "run the same command again" in err
    assert "Stopped runs" in (tmp_path / "sweep" / "results.md").read_text()
    assert main(["sweep", str(timed), "--out", str(tmp_path / "sweep"), "--no-progress"]) == 0
    with open(tmp_path / "sweep" / "results.csv") as handle:
        (row,) = csv.DictReader(handle)
    assert row["status"] == "done" and row["step"] == "3"
    uninterrupted = straight / "results" / "xor-seed0"
    assert _metrics(run) == _metrics(uninterrupted)
    a, b = load_checkpoint(run / RunDir.CHECKPOINT), load_checkpoint(uninterrupted / RunDir.CHECKPOINT)
    assert a.step == b.step == 3 and all(torch.equal(a.params[name], b.params[name]) for name in a.params)
    assert [(s["from_step"], s["to_step"], s["exit"]) for s in read_sittings(run)] == [(0, 1, 0), (1, 2, 0), (2, 3, 0)]
    assert len(read_sittings(uninterrupted)) == 1


@pytest.mark.slow
def test_max_minutes_on_the_command_line_sets_this_sittings_limit(tiny_gpt2, tmp_path, capsys):
    """`fpt sweep SPEC --max-minutes M` on a spec without max_minutes: the cell stops after a step
    with a checkpoint; the same command without the flag continues it to its end."""
    spec, out = _named_spec(tmp_path, tiny_gpt2), str(tmp_path / "sweep")
    assert main(["sweep", str(spec), "--out", out, "--no-progress", "--max-minutes", "1e-6"]) == 0
    assert "1 of 1 runs stopped at max_minutes 1e-06" in capsys.readouterr().err
    assert not RunDir(tmp_path / "results" / "xor-seed0").is_finished
    assert main(["sweep", str(spec), "--out", out, "--no-progress"]) == 0
    with open(tmp_path / "sweep" / "results.csv") as handle:
        (row,) = csv.DictReader(handle)
    assert row["status"] == "done" and row["step"] == "3"


@pytest.mark.parametrize("value", ["0", "-1", "inf"])
def test_a_bad_max_minutes_for_a_sweep_is_one_line_and_runs_nothing(tiny_gpt2, tmp_path, capsys, value):
    spec = _named_spec(tmp_path, tiny_gpt2)
    assert main(["sweep", str(spec), "--out", str(tmp_path / "sweep"), f"--max-minutes={value}"]) == 2
    assert "--max-minutes must be a positive number" in one_line_error(capsys)
    assert not (tmp_path / "sweep").exists() and not (tmp_path / "results").exists()


def test_a_cell_whose_options_changed_is_refused_from_any_out_folder(tiny_gpt2, tmp_path):
    """The record that guards a `runs:` folder lives beside the runs, not under --out: editing a
    finished cell's options and running the spec with another --out (or from elsewhere) is refused."""
    path = _named_spec(tmp_path, tiny_gpt2)
    assert run_sweep(load_spec(path), tmp_path / "first", progress=False)[0]["status"] == "done"
    path.write_text(path.read_text().replace("steps: 3", "steps: 4"))
    with pytest.raises(FptError, match=r"was run with other options.*--steps 3 -> 4.*results/xor-seed0"):
        run_sweep(load_spec(path), tmp_path / "second", progress=False)


def test_a_sitting_names_the_gpus_of_its_machine_and_none_where_there_are_none(monkeypatch):
    from fpt.core.devices import gpu_names
    from fpt.experiments.sittings import this_machine

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    gpu_names.cache_clear()
    assert "GPU" not in this_machine()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: f"NVIDIA H100 80GB HBM3 #{i}")
    gpu_names.cache_clear()
    assert this_machine().endswith("; GPU: NVIDIA H100 80GB HBM3 #0, NVIDIA H100 80GB HBM3 #1")
    gpu_names.cache_clear()  # the next test asks the real machine again
