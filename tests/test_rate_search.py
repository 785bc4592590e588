"""`fpt reproduce controls --lr-search ARM=RATES` (issue 32): an arm's own rate, chosen on validation
alone, its probes kept out of the table, its seed 0 reused, and the table saying so."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers import table_row, write_arm_run

from fpt.cli import main
from fpt.errors import FptError
from fpt.experiments.controls import controls_markdown, read_arm_runs
from fpt.experiments.rate_search import PROBES, choose_rate, parse_lr_search, probe_lines
from fpt.experiments.reproduce import Reproduction
from fpt.experiments.sweep import train_args


def test_rates_are_read_per_arm():
    assert parse_lr_search(["full=1e-4,3e-4", "attention=0.001, 0.003"]) == {
        "full": [1e-4, 3e-4],
        "attention": [1e-3, 3e-3],
    }
    assert parse_lr_search(None) == {}


@pytest.mark.parametrize(
    "items, message",
    [
        (["full"], "takes ARM=RATE,RATE"),
        (["full="], "takes ARM=RATE,RATE"),
        (["=1e-4,3e-4"], "takes ARM=RATE,RATE"),
        (["full=1e-4,fast"], "takes ARM=RATE,RATE"),
        (["full=1e-4,3e-4", "full=1e-3,3e-3"], "given twice"),
    ],
)
def test_a_malformed_search_is_one_line(items, message):
    with pytest.raises(FptError, match=message):
        parse_lr_search(items)


@pytest.mark.parametrize(
    "tables, searched, skipped, message",
    [
        (["controls"], {"lstm": [1e-4, 3e-4]}, (), "no arm 'lstm'"),
        (["controls"], {"full": [1e-4, 3e-4]}, ("full",), "in --skip-variants"),
        (["controls"], {"full": [1e-4]}, (), "at least two different rates"),
        (["controls"], {"full": [1e-4, 1e-4]}, (), "at least two different rates"),
        (["controls"], {"full": [0.0, 1e-4]}, (), "above 0"),
        (["controls"], {"full": [math.inf, 1e-4]}, (), "above 0"),
        (["table1"], {"full": [1e-4, 3e-4]}, (), "for the controls table alone"),
    ],
)
def test_a_search_that_cannot_be_run_is_refused_before_anything_runs(tables, searched, skipped, message):
    with pytest.raises(FptError, match=message):
        Reproduction(tables, tasks=["bit-xor"], skip_variants=skipped, lr_search=searched).check()


def test_the_searched_arm_leaves_the_shared_sweep_and_differs_from_it_in_its_rate_alone():
    plan = Reproduction(
        ["controls"],
        tasks=["ucr:JapaneseVowels"],
        budget=500,
        options={"recipe": "fast"},
        lr_search={"full": [1e-4, 3e-4]},
    )
    plan.check()
    (folder, shared, _), *rest = plan.sweeps()
    assert folder == "ucr-JapaneseVowels" and "full" not in shared.grid["variant"] and not rest
    ((task, arm, probe_folder, probes),) = plan.probe_sweeps()
    assert (task, arm, probe_folder) == ("ucr:JapaneseVowels", "full", f"{PROBES}/ucr-JapaneseVowels-full-lr")
    assert [(c.values["lr"], c.values["seed"]) for c in probes.cells()] == [(1e-4, 0), (3e-4, 0)]
    _, (own_folder, own, _) = plan.sweeps({("ucr:JapaneseVowels", "full"): 3e-4})
    assert own_folder == "ucr-JapaneseVowels-full-lr" and own.grid["seed"] == [0, 1, 2]
    assert own.grid["variant"] == ["full"] and own.options["lr"] == 3e-4
    # the arm's own cells and its probe at the chosen rate are one run; the shared options reach both
    seed0 = {"task": "ucr:JapaneseVowels", "variant": "full", "seed": 0}
    probe = next(c for c in probes.cells() if c.values["lr"] == 3e-4)
    assert sorted(train_args(own.options, seed0)) == sorted(train_args(probes.options, probe.values))
    assert {k: v for k, v in own.options.items() if k != "lr"} == shared.options == probes.options
    assert "--no-znorm" in train_args(own.options, seed0)


def _probe(root: Path, lr: float, final: dict | None, status: str = "done") -> dict:
    run = root / f"lr={lr}"
    run.mkdir(parents=True)
    if final is not None:
        (run / "config.json").write_text(json.dumps({"task": "bit-xor", "lr": lr}))
        summary = {"step": 10, "final": {**final, "examples": 50}, "trained_params": 9, "total_params": 9, "wall_time_s": 1.0}
        (run / "summary.json").write_text(json.dumps({**summary, "status": "completed"}))
    return {"lr": lr, "status": status, "run_dir": str(run)}


def test_the_rate_is_chosen_on_validation_then_loss_then_the_lower_rate(tmp_path):
    rows = [
        _probe(tmp_path / "a", 1e-3, {"split": "val", "accuracy": 0.90, "loss": 0.2}),
        _probe(tmp_path / "a", 3e-4, {"split": "val", "accuracy": 0.95, "loss": 0.3}),
        _probe(tmp_path / "a", 1e-4, {"split": "val", "accuracy": 0.95, "loss": 0.1}),
        _probe(tmp_path / "a", 3e-3, None, status="failed"),
    ]
    assert choose_rate(rows) == (1e-4, Path(rows[2]["run_dir"]))
    tied = [
        _probe(tmp_path / "b", 3e-4, {"split": "heldout", "accuracy": 0.5, "loss": 0.7}),
        _probe(tmp_path / "b", 1e-4, {"split": "heldout", "accuracy": 0.5, "loss": 0.7}),
    ]
    assert choose_rate(tied)[0] == 1e-4
    forecast = [  # lower MSE wins; a run that diverged (NaN) never does
        _probe(tmp_path / "c", 1e-4, {"split": "val", "mse": 0.40, "mae": 0.4, "loss": 0.40}),
        _probe(tmp_path / "c", 3e-4, {"split": "val", "mse": 0.38, "mae": 0.4, "loss": 0.38}),
        _probe(tmp_path / "c", 1e-3, {"split": "val", "mse": math.nan, "mae": math.nan, "loss": math.nan}),
    ]
    assert choose_rate(forecast)[0] == 3e-4
    note = probe_lines({("ett:ETTh1", "full"): (forecast, 3e-4)})
    assert "full on ett:ETTh1: 0.0003 (0.0001: mse 0.400; 0.0003: mse 0.380; 0.001: mse nan)" in note


def test_a_rate_is_never_chosen_on_the_test_split_or_from_nothing(tmp_path):
    with pytest.raises(FptError, match="chooses on validation"):
        choose_rate([_probe(tmp_path, 1e-4, {"split": "test", "accuracy": 0.9, "loss": 0.1})])
    with pytest.raises(FptError, match="no probe finished"):
        choose_rate([_probe(tmp_path, 3e-4, None, status="failed")])


def test_the_table_leaves_probes_out_refuses_a_seed_twice_and_marks_an_own_rate(tmp_path):
    root = tmp_path / "controls"
    for seed in (0, 1):
        write_arm_run(root / "bit-xor" / "runs", "fpt", seed, 0.9, 0.5, 500, options=None)
        write_arm_run(root / "bit-xor-full-lr" / "runs", "full", seed, 0.8, 0.5, 900)
    for run in (root / "bit-xor-full-lr" / "runs").iterdir():
        config = json.loads((run / "config.json").read_text())
        (run / "config.json").write_text(json.dumps({**config, "lr": 3e-4}))
    write_arm_run(root / PROBES / "bit-xor-full-lr" / "runs", "full", 0, 0.1, 0.5, 900)  # another rate's probe
    runs = read_arm_runs(root)
    assert sorted((r.arm, r.seed, r.lr) for r in runs) == [("fpt", 0, None), ("fpt", 1, None)] + [
        ("full", 0, 3e-4),
        ("full", 1, 3e-4),
    ]
    text = controls_markdown(runs)
    assert table_row(text, "XOR", "full")[1].endswith(", at its own rate (0.0003)")
    assert "at its own rate" not in table_row(text, "XOR", "fpt")[1]
    assert "except that an arm marked 'at its own rate'" in text and "no arm was tuned apart" not in text
    write_arm_run(root / "elsewhere", "full", 1, 0.8, 0.5, 900)
    with pytest.raises(FptError, match="two runs of full seed 1"):
        read_arm_runs(root)


@pytest.mark.slow
def test_lr_search_end_to_end_reuses_the_chosen_probe_and_runs_again_as_a_resume(tiny_gpt2, tmp_path):
    out = tmp_path / "out"
    argv = ["reproduce", "controls", "--tasks", "bit-xor", "--budget", "2", "--seeds", "2", "--backbone", tiny_gpt2]
    argv += ["--out", str(out), "--no-progress", "--set", "recipe=fast", "--lr-search", "full=1e-3,3e-2"]
    argv += ["--skip-variants", "random,none,attention,block"]
    for option in ("n_bits=4", "eval_size=8", "batch_size=4", "eval_every=1", "warmup_steps=0"):
        argv += ["--set", option]
    assert main(argv) == 0
    probes = {
        json.loads((p / "config.json").read_text())["lr"]: p
        for p in (out / PROBES / "bit-xor-full-lr" / "runs").iterdir()
    }
    assert sorted(probes) == [1e-3, 3e-2]
    finals = {lr: json.loads((p / "summary.json").read_text())["final"] for lr, p in probes.items()}
    assert {f["split"] for f in finals.values()} == {"heldout"}
    best = min(finals, key=lambda lr: (-finals[lr]["accuracy"], finals[lr]["loss"], lr))
    own = {r.seed: r for r in read_arm_runs(out) if r.arm == "full"}
    assert sorted(own) == [0, 1] and {r.lr for r in own.values()} == {best}
    assert all(r.path.parent.parent.name == "bit-xor-full-lr" for r in own.values())
    # seed 0 is the chosen probe, copied: the same training, not a second one
    assert (own[0].path / "metrics.jsonl").read_text() == (probes[best] / "metrics.jsonl").read_text()
    text = (out / "controls.md").read_text()
    assert f"at its own rate ({best:g})" in text and "Rates of their own (--lr-search)" in text
    assert "| random | " in text and "not run" in table_row(text, "XOR", "random")[2]
    # the same command again trains nothing: every run, probe or not, is finished and kept
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")}
    assert main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")} == stamps
