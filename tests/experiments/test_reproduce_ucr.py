"""`fpt reproduce ucr` (issue 57): fpt and its random / none controls on every UCR/UEA set sktime
bundles, a validation split carved from each training split, MiniRocket and 1-NN DTW scored once per
set on the same test split, and the table written from the run files, naming who wins."""

from __future__ import annotations

import importlib.util
import json

import pytest
from helpers import one_line_error, write_ts

from fpt import FptError
from fpt.cli import main
from fpt.experiments.cell_records import train_flags
from fpt.experiments.paper import UCR_ARMS, UCR_SETS, VARIANTS
from fpt.experiments.reproduce import Reproduction
from fpt.experiments.sweep_spec import train_args
from fpt.experiments.ucr_tables import read_ucr_runs, ucr_markdown, ucr_table_text

needs_sktime = pytest.mark.skipif(importlib.util.find_spec("sktime") is None, reason="reads .ts files with sktime")


def _cell_flags(spec) -> dict[str, dict[str, str]]:
    return {c.name: train_flags(train_args(spec.options, c.values, spec.variants)) for c in spec.cells()}


def test_every_set_runs_every_arm_and_seed_chosen_on_validation_and_scores_the_references_once():
    plan = Reproduction(["ucr"], seeds=3, budget=500)
    plan.check()
    sweeps = plan.sweeps()
    assert [folder for folder, _, _ in sweeps] == [task.replace(":", "-") for task in UCR_SETS]
    assert UCR_ARMS == ["fpt", "random", "none"]
    for (_, spec, skipped), (task, val_size) in zip(sweeps, UCR_SETS.items()):
        assert not skipped
        flags = _cell_flags(spec)
        assert sorted(flags) == sorted(f"{arm}-seed{k}" for arm in UCR_ARMS for k in range(3))
        assert [name for name, f in flags.items() if "--baselines" in f] == ["fpt-seed0"]
        for name, f in flags.items():
            assert f["--task"] == task and f["--val-size"] == str(val_size) and f["--steps"] == "500"
            # JapaneseVowels raw, as the controls and the UEA table read it; the UCR sets z-normalised (the default)
            assert ("--no-znorm" in f) == (task == "ucr:JapaneseVowels")
            # the weights of the best validation evaluation, ten of them, the test split scored once at the end
            assert f["--keep-best"] == "on" and f["--eval-every"] == "50" and f["--recipe"] == "fast"
            assert f["--warmup-steps"] == "50" and f["--dropout"] == "0.0"
            arm = name.rsplit("-", 1)[0]
            assert {k: f[f"--{k}"] for k in VARIANTS[arm]} == {k: str(v) for k, v in VARIANTS[arm].items()}
    plan = Reproduction(["ucr"], tasks=["ucr:GunPoint"], seeds=1, options={"keep_best": False, "baselines": True})
    plan.check()
    ((_, spec, _),) = plan.sweeps()
    assert all(f.get("--no-keep-best") == "on" and "--baselines" in f for f in _cell_flags(spec).values())


@needs_sktime
def test_the_sets_are_every_classification_set_sktime_bundles_each_leaving_most_series_to_train():
    from fpt.data.ts import read_ts, ucr_datasets, ucr_split_files

    assert [task.partition(":")[2] for task in UCR_SETS] == ucr_datasets()
    for task, val_size in UCR_SETS.items():
        _, labels = read_ts(ucr_split_files(task.partition(":")[2], None)[0])
        assert 4 <= val_size <= len(labels) // 5 + 1, task  # about a fifth held out, at least 4


def _write_run(root, dataset: str, arm: str, seed: int, accuracy: float, references: dict | None = None, **more):
    """A finished run's files as `fpt train --task ucr:NAME --val-size N` writes them (what the table reads)."""
    run = root / f"ucr-{dataset}" / "runs" / f"{arm}-seed{seed}"
    run.mkdir(parents=True)
    config = {"task": f"ucr:{dataset}", "model": "fpt", "body": "backbone", "init": "pretrained", "policy": "fpt"}
    config.update(VARIANTS[arm], seed=seed, backbone="minilm", recipe="fast")
    if config["body"] != "backbone":
        config["policy"] = "full"  # as a control's run records it
    (run / "config.json").write_text(json.dumps(config))
    test = {"split": "test", "accuracy": accuracy / 100, "examples": 150, "loss": 0.5}
    summary = {"step": 300, "final": {**test, "split": "val", "examples": 10}, "test": {"test": test}}
    summary["task_notes"] = {"train_size": 40, "val_size": 10, "test_size": 150}
    summary.update(trained_params=10, total_params=100, wall_time_s=1.0, status="completed")
    if references is not None:
        scores = {name: {"accuracy": value / 100} for name, value in references.items()}
        summary["baselines"] = {"split": "test", "metric": "accuracy", "scores": scores, **more}
    (run / "summary.json").write_text(json.dumps(summary))


def _cells(text: str, dataset: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {dataset} "))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_table_is_built_from_the_run_files_and_says_who_wins_each_set_and_whether_the_target_is_met(tmp_path):
    dtw_left_out = ["1-NN DTW: too costly here (2.1e+10 DTW cells, above 2e+09)"]
    _write_run(tmp_path, "GunPoint", "fpt", 0, 90.0, {"MiniRocket": 99.5, "1-NN DTW": 90.5, "majority label": 50})
    _write_run(tmp_path, "GunPoint", "fpt", 1, 92.0)
    _write_run(tmp_path, "GunPoint", "random", 0, 80.0)
    _write_run(tmp_path, "GunPoint", "none", 0, 70.0)
    _write_run(tmp_path, "UnitTest", "fpt", 0, 100.0, {"MiniRocket": 95.5}, missing=dtw_left_out)
    _write_run(tmp_path, "UnitTest", "random", 0, 100 * 22 / 22)  # as the same share of the test series, a tie
    text = ucr_markdown(read_ucr_runs(tmp_path), "ucr", skipped=("none",))
    assert _cells(text, "GunPoint") == ["GunPoint (40 / 10 / 150)", "91.0 ± 1.4 (n=2)", "80.0 (n=1)", "70.0 (n=1)"] + [
        "99.5",
        "90.5",
        "-8.5",
    ]
    assert _cells(text, "UnitTest")[1:] == ["100.0 (n=1)", "100.0 (n=1)", "skipped for time", "95.5", "—", "+4.5"]
    assert (
        "- GunPoint: MiniRocket wins, 99.5 against fpt's 91.0: by 8.5 points; best of every row: MiniRocket (99.5)."
        in (text)
    )
    won = "- UnitTest: fpt wins, 100.0 against MiniRocket's 95.5: by 4.5 points"
    assert f"{won}; best of every row: fpt and random (100.0)." in text
    assert "Average gap fpt - MiniRocket over the 2 set(s) with both scores: -2.0 points" in text
    assert "on average): met." in text and "majority label" not in text
    assert "Left out: UnitTest: 1-NN DTW: too costly here" in text and "ACSF1, ArrowHead, BasicMotions" in text
    # a third set far behind: the average falls out of reach, and the table says so
    _write_run(tmp_path, "ItalyPowerDemand", "fpt", 0, 80.0, {"MiniRocket": 96.5})
    text = ucr_table_text(tmp_path)
    assert "- ItalyPowerDemand: MiniRocket wins, 96.5 against fpt's 80.0: by 16.5 points" in text
    assert "over the 3 set(s) with both scores: -6.8 points" in text
    assert "NOT met: fpt is 6.8 points behind MiniRocket on average." in text
    assert _cells(text, "UnitTest")[3] == "not run"  # from the files alone, which do not say what was skipped


def test_two_runs_of_one_cell_and_a_folder_without_runs_are_refused(tmp_path):
    _write_run(tmp_path / "a", "GunPoint", "fpt", 0, 90.0)
    _write_run(tmp_path / "b", "GunPoint", "fpt", 0, 91.0)
    with pytest.raises(FptError, match="ucr:GunPoint: two runs of fpt seed 0"):
        read_ucr_runs(tmp_path)
    with pytest.raises(FptError, match="no finished ucr runs found"):
        ucr_table_text(tmp_path / "a" / "nothing-here")


@pytest.mark.parametrize(
    "more, said",
    [
        (["--tasks", "ucr:Nope"], "ucr has no task ucr:Nope; its tasks are ucr:ACSF1"),
        (["--budget-search", "100,200"], "--budget-search is for the m3 and tourism tables alone"),
        (["--lr-search", "fpt=1e-3,1e-4"], "--lr-search is for the controls table alone"),
        (["--seeds", "0"], "--budget and --seeds must be at least 1"),
    ],
)
def test_a_bad_option_is_one_line_and_exit_2(tmp_path, capsys, more, said):
    out = tmp_path / "out"
    assert main(["reproduce", "ucr", *more, "--out", str(out), "--no-progress"]) == 2
    assert said in one_line_error(capsys) and not out.exists()


@needs_sktime
@pytest.mark.slow
def test_reproduce_ucr_trains_each_cell_and_writes_the_table_beside_minirocket(tiny_gpt2, tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)

    def cases(n: int) -> list:  # two classes apart in their mean, 16 steps (MiniRocket needs at least 9)
        return [([(rng.normal(size=16) + 3 * (i % 2)).tolist()], str(i % 2)) for i in range(n)]

    write_ts(tmp_path / "data" / "UnitTest" / "UnitTest_TRAIN.ts", cases(12), name="UnitTest")
    write_ts(tmp_path / "data" / "UnitTest" / "UnitTest_TEST.ts", cases(6), name="UnitTest")
    out = tmp_path / "out"
    argv = ["reproduce", "ucr", "--tasks", "ucr:UnitTest", "--seeds", "2", "--budget", "2", "--backbone", tiny_gpt2]
    argv += ["--out", str(out), "--no-progress", "--set", "precision=fp32", "--set", f"data_dir={tmp_path / 'data'}"]
    assert main(argv) == 0
    runs = {p.name: json.loads((p / "summary.json").read_text()) for p in (out / "ucr-UnitTest" / "runs").iterdir()}
    assert sorted(runs) == sorted(f"{arm}-seed{k}" for arm in UCR_ARMS for k in (0, 1))
    assert [name for name, s in runs.items() if "baselines" in s] == ["fpt-seed0"]
    assert all(s["final"]["split"] == "val" and s["test"]["test"]["examples"] == 6 for s in runs.values())
    assert all(s["task_notes"]["val_size"] == 4 for s in runs.values())
    references = runs["fpt-seed0"]["baselines"]["scores"]
    text = (out / "ucr.md").read_text()
    assert _cells(text, "UnitTest")[4] == f"{100 * references['MiniRocket']['accuracy']:.1f}"
    accuracies = [100 * runs[f"fpt-seed{k}"]["test"]["test"]["accuracy"] for k in (0, 1)]
    gap = sum(accuracies) / 2 - 100 * references["MiniRocket"]["accuracy"]
    assert _cells(text, "UnitTest")[6] == f"{gap:+.1f}" and "- UnitTest: " in text
    assert ucr_table_text(out).split("\n", 1)[1] in text  # the same table from the files alone, bar its title
