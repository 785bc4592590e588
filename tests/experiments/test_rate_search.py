"""`fpt reproduce controls --lr-search ARM=RATES` (issue 32): an arm's own rate, chosen on validation
alone, its probes kept out of the table, its seed 0 reused, and the table saying so."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest
from helpers import table_row, write_arm_run

from fpt.cli import main
from fpt.core.errors import DIVERGED, FptError
from fpt.experiments.cell_records import cell_run, train_flags
from fpt.experiments.controls import controls_markdown, read_arm_runs
from fpt.experiments.paper import PAPER_VARIANTS
from fpt.experiments.rate_search import PROBES, choose_rate, parse_lr_search, probe_section, read_choices
from fpt.experiments.reproduce import Reproduction, run_reproduction
from fpt.experiments.sweep import sweep_outcome
from fpt.experiments.sweep_spec import train_args
from fpt.experiments.tables import failure_summary


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
    assert train_flags(train_args(own.options, seed0, PAPER_VARIANTS)) == train_flags(
        train_args(probes.options, probe.values, PAPER_VARIANTS)
    )
    assert {k: v for k, v in own.options.items() if k != "lr"} == shared.options == probes.options
    assert "--no-znorm" in train_args(own.options, seed0, PAPER_VARIANTS)


def _probe(root: Path, lr: float, final: dict | None, status: str = "done", failure: str = "") -> dict:
    run = root / f"lr={lr}"
    run.mkdir(parents=True)
    if final is not None:
        (run / "config.json").write_text(json.dumps({"task": "bit-xor", "lr": lr}))
        summary = {"step": 10, "final": {**final, "examples": 50}, "trained_params": 9, "total_params": 9}
        (run / "summary.json").write_text(json.dumps({**summary, "wall_time_s": 1.0, "status": "completed"}))
    return {"lr": lr, "status": status, "failure": failure, "error": "it broke", "run_dir": str(run)}


def test_the_rate_is_chosen_on_validation_then_loss_then_the_lower_rate(tmp_path):
    rows = [
        _probe(tmp_path / "a", 1e-3, {"split": "val", "accuracy": 0.90, "loss": 0.2}),
        _probe(tmp_path / "a", 3e-4, {"split": "val", "accuracy": 0.95, "loss": 0.3}),
        _probe(tmp_path / "a", 1e-4, {"split": "val", "accuracy": 0.95, "loss": 0.1}),
        _probe(tmp_path / "a", 3e-3, None, status="failed", failure=DIVERGED),  # lost, not in the way
    ]
    assert choose_rate(rows, tmp_path) == (1e-4, Path(rows[2]["run_dir"]))
    tied = [
        _probe(tmp_path / "b", 3e-4, {"split": "heldout", "accuracy": 0.5, "loss": 0.7}),
        _probe(tmp_path / "b", 1e-4, {"split": "heldout", "accuracy": 0.5, "loss": 0.7}),
    ]
    assert choose_rate(tied, tmp_path)[0] == 1e-4
    forecast = [  # lower MSE wins
        _probe(tmp_path / "c", 1e-4, {"split": "val", "mse": 0.40, "mae": 0.4, "loss": 0.40}),
        _probe(tmp_path / "c", 3e-4, {"split": "val", "mse": 0.38, "mae": 0.4, "loss": 0.38}),
        _probe(tmp_path / "c", 1e-3, {"split": "val", "mse": 0.39, "mae": 0.3, "loss": 0.39}),
    ]
    assert choose_rate(forecast, tmp_path)[0] == 3e-4


def test_a_rate_is_never_chosen_on_the_test_split_past_a_broken_probe_or_from_nothing(tmp_path):
    with pytest.raises(FptError, match="chooses on validation"):
        choose_rate([_probe(tmp_path / "a", 1e-4, {"split": "test", "accuracy": 0.9, "loss": 0.1})], tmp_path)
    broken = [
        _probe(tmp_path / "b", 1e-4, {"split": "val", "accuracy": 0.9, "loss": 0.1}),
        _probe(tmp_path / "b", 3e-4, None, status="failed", failure="usage"),  # fixed, it might win
    ]
    with pytest.raises(FptError, match="probe at lr 0.0003 failed \\(it broke\\); fix it"):
        choose_rate(broken, tmp_path)
    nothing = [_probe(tmp_path / "c", lr, None, status="failed", failure=DIVERGED) for lr in (3e-4, 1e-3)]
    with pytest.raises(FptError, match="every probe diverged, so no rate is chosen; try lower rates"):
        choose_rate(nothing, tmp_path)


def test_a_task_without_a_validation_split_is_refused_before_anything_runs():
    searched = {"full": [1e-4, 3e-4]}
    with pytest.raises(
        FptError, match="mnist has none unless it holds some out: run it apart from the tasks that take no val_size"
    ):
        Reproduction(["controls"], tasks=["bit-xor", "mnist"], lr_search=searched).check()
    Reproduction(["controls"], tasks=["mnist"], options={"val_size": 5000}, lr_search=searched).check()
    Reproduction(["controls"], tasks=["bit-xor", "ucr:JapaneseVowels", "ett:ETTh1"], lr_search=searched).check()


def test_the_table_leaves_probes_out_refuses_a_seed_twice_and_marks_every_searched_arm(tmp_path):
    root = tmp_path / "controls"
    for seed in (0, 1):
        write_arm_run(root / "bit-xor" / "runs", "none", seed, 0.6, None, 300, lr=3e-3)
        write_arm_run(root / "bit-xor-fpt-lr" / "runs", "fpt", seed, 0.9, 0.5, 500, lr=1e-3)
        write_arm_run(root / "bit-xor-full-lr" / "runs", "full", seed, 0.8, 0.5, 900, lr=1e-3)  # fpt's rate too
    write_arm_run(root / PROBES / "bit-xor-full-lr" / "runs", "full", 0, 0.1, 0.5, 900)  # another rate's probe
    runs = read_arm_runs(root)
    assert sorted((r.arm, r.seed, r.lr) for r in runs) == [
        ("fpt", 0, 1e-3),
        ("fpt", 1, 1e-3),
        ("full", 0, 1e-3),
        ("full", 1, 1e-3),
        ("none", 0, 3e-3),
        ("none", 1, 3e-3),
    ]
    text = controls_markdown(runs)
    assert table_row(text, "XOR", "full")[1].endswith(", at its own rate (0.001)")
    assert table_row(text, "XOR", "fpt")[1].endswith(", at its own rate (0.001)")
    assert "at its own rate" not in table_row(text, "XOR", "none")[1]
    # where no arm was searched, an arm at another rate than fpt's is marked too
    for seed in (0, 1):
        write_arm_run(root / "bit-memory", "fpt", seed, 0.9, None, 300, task="bit-memory", lr=3e-3)
    write_arm_run(root / "bit-memory", "block", 0, 0.9, None, 300, task="bit-memory", lr=1e-2)
    write_arm_run(root / "bit-memory", "none", 0, 0.9, None, 300, task="bit-memory", lr=3e-3)
    text = controls_markdown(read_arm_runs(root))
    assert table_row(text, "Bit Memory", "block")[1].endswith(", at its own rate (0.01)")
    assert "at its own rate" not in table_row(text, "Bit Memory", "none")[1]
    assert "except that an arm marked 'at its own rate'" in text and "no arm was tuned apart" not in text
    write_arm_run(root / "elsewhere", "full", 1, 0.8, 0.5, 900)
    with pytest.raises(FptError, match="two runs of full seed 1"):
        read_arm_runs(root)


class FakeTraining:
    """An executor that writes each cell's run files in place of training it: the held-out accuracy
    its rate is given in `watched`; a rate in `failures` fails with that kind. It notes what it trained."""

    def __init__(self, watched: dict[float, float], failures: dict[float, str] | None = None):
        self.watched, self.failures, self.trained = watched, failures or {}, []

    def __call__(self, cells, spec, sweep_dir, tracking=None):
        for index, cell in enumerate(cells):
            run = cell_run(sweep_dir, cell)
            lr = float(train_flags(train_args(spec.options, cell.values, PAPER_VARIANTS)).get("--lr", 3e-3))
            row = {**cell.values, "run_dir": str(run.path), "failure": "", "error": ""}
            if not run.is_finished:
                self.trained.append((cell.values["variant"], cell.values["seed"], lr))
                if lr in self.failures:
                    yield index, {**row, "status": "failed", "failure": self.failures[lr], "error": "it broke"}
                    continue
                arm, seed = cell.values["variant"], cell.values["seed"]
                write_arm_run(sweep_dir, arm, seed, 0.7, 0.5, 100, run=run.path, lr=lr, watched=self.watched[lr])
            yield index, {**row, "status": "done"}

    def describe(self, parallel):
        return "a test's fake training"


def _plan(rates=(1e-4, 3e-4, 1e-3)) -> Reproduction:
    skipped = ("random", "none", "attention", "block")
    searched = {"full": list(rates)}
    return Reproduction(["controls"], tasks=["bit-xor"], budget=500, seeds=2, skip_variants=skipped, lr_search=searched)


def test_a_search_chooses_once_reuses_its_probe_and_lets_a_diverged_rate_lose(tmp_path):
    fake = FakeTraining({1e-4: 0.8, 3e-4: 0.9, 3e-3: 0.95}, failures={1e-3: DIVERGED})
    rows, text = run_reproduction(_plan(), tmp_path, progress=False, executor=fake)
    probes = [("full", 0, 1e-4), ("full", 0, 3e-4), ("full", 0, 1e-3)]
    assert sorted(fake.trained) == sorted(probes + [("fpt", 0, 3e-3), ("fpt", 1, 3e-3), ("full", 1, 3e-4)])
    full = {r.seed: r for r in read_arm_runs(tmp_path) if r.arm == "full"}
    assert {r.lr for r in full.values()} == {3e-4} and full[0].path.parent.parent.name == "bit-xor-full-lr"
    chosen = json.loads((tmp_path / PROBES / "bit-xor-full-lr" / "chosen.json").read_text())
    assert chosen["lr"] == 3e-4 and [r["status"] for r in chosen["probes"]] == ["done", "done", "diverged"]
    assert chosen["best"] == "task=bit-xor,variant=full,lr=0.0003,seed=0"  # names, read under the folder it is in
    assert failure_summary(rows) is None  # a rate that diverged lost the search; nothing failed
    assert sweep_outcome(rows, tmp_path)[0] == {"runs": 11, "done": 6, "failed": 0, "skipped": 4, "diverged": 1}
    assert table_row(text, "XOR", "full")[1].endswith(", at its own rate (0.0003)")
    probe_line = "- full on bit-xor: lr 0.0003; probes: 0.0001: heldout accuracy 80.00; 0.0003: heldout accuracy 90.00"
    assert probe_line + "; 0.001: diverged\n" in text and "Failed runs" not in text
    assert "lr=0.001" in (tmp_path / "results.csv").read_text()  # the probes are in results.csv
    # the same command again trains nothing and chooses nothing anew; other rates are refused
    again = FakeTraining({})
    assert run_reproduction(_plan(), tmp_path, progress=False, executor=again)[1] == text and again.trained == []
    with pytest.raises(FptError, match="chosen from 0.0001, 0.0003, 0.001, not these rates"):
        run_reproduction(_plan((1e-4, 3e-4)), tmp_path, progress=False, executor=again)
    # the table from the files alone says how the rate was chosen too
    controls = tmp_path / "controls-again.md"
    assert main(["controls", str(tmp_path), "--out", str(controls)]) == 0 and probe_line in controls.read_text()
    # nor are other options for the probes, even with no other sweep begun yet to refuse them
    for folder in ("bit-xor", "bit-xor-full-lr"):
        shutil.rmtree(tmp_path / folder)
    with pytest.raises(FptError, match="was run with other options \\(--steps 500 -> 800\\)"):
        run_reproduction(dataclasses.replace(_plan(), budget=800), tmp_path, progress=False, executor=again)
    assert again.trained == []


def test_probes_that_print_alike_show_the_val_loss_that_chose_between_them(tmp_path):
    probes = []
    for lr, watched, loss in [(1e-4, 0.99941, 0.020), (3e-4, 0.99944, 0.012)]:
        run = tmp_path / f"lr{lr}"
        write_arm_run(tmp_path, "full", 0, 0.99, None, 100, run=run, lr=lr, watched=watched)
        summary = json.loads((run / "summary.json").read_text())
        summary["final"]["loss"] = loss
        (run / "summary.json").write_text(json.dumps(summary))
        probes.append({"lr": lr, "run_dir": str(run), "status": "done"})
    probes.append({"lr": 1e-3, "run_dir": str(tmp_path / "never"), "status": "diverged"})
    text = probe_section({("bit-memory", "full"): {"lr": 3e-4, "probes": probes}})
    assert (
        "probes: 0.0001: heldout accuracy 99.9410, val loss 0.02; 0.0003: heldout accuracy 99.9440, val loss 0.012; "
        "0.001: diverged\n" in text
    )
    # scores that print apart need no loss beside them
    text = probe_section({("bit-memory", "full"): {"lr": 3e-4, "probes": probes[1:]}})
    assert "probes: 0.0003: heldout accuracy 99.94; 0.001: diverged" in text


def test_a_few_shot_search_is_kept_apart_from_the_full_splits_on_the_same_task(tmp_path):
    # both searches under one root (benchmarks/results/controls): one line each, neither hiding the other
    for folder, fraction, lr in [("etth1", None, 1e-4), ("etth1-train10", 0.1, 3e-4)]:
        where = tmp_path / folder / PROBES / "ett-ETTh1-full-lr"
        (where / "runs" / "probe").mkdir(parents=True)
        config = {"task": "ett:ETTh1", "train_fraction": fraction, "lr": lr}
        (where / "runs" / "probe" / "config.json").write_text(json.dumps(config))
        probes = [{"lr": lr, "run_dir": "probe", "status": "done"}]
        record = {"task": "ett:ETTh1", "arm": "full", "lr": lr, "best": "probe", "probes": probes}
        (where / "chosen.json").write_text(json.dumps(record))
    choices = read_choices(tmp_path)
    assert {key: record["lr"] for key, record in choices.items()} == {
        ("ett:ETTh1", "full"): 1e-4,
        ("ett:ETTh1 (few-shot: 10% of train)", "full"): 3e-4,
    }


def test_a_search_reads_its_record_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fake = FakeTraining({1e-4: 0.8, 3e-4: 0.9, 1e-3: 0.7, 3e-3: 0.95})
    text = run_reproduction(_plan(), Path("out"), progress=False, executor=fake)[1]
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    again = FakeTraining({})
    assert run_reproduction(_plan(), Path("../out"), progress=False, executor=again)[1] == text
    assert again.trained == [] and "0.0003: heldout accuracy 90.00" in text


def test_a_choice_its_arm_refuses_is_not_kept(tmp_path):
    run_reproduction(
        _plan((1e-4, 3e-4)), tmp_path, progress=False, executor=FakeTraining({1e-4: 0.8, 3e-4: 0.9, 3e-3: 0.9})
    )
    probes = tmp_path / PROBES / "bit-xor-full-lr"
    (probes / "chosen.json").unlink()  # as an fpt that kept no choice left it; 1e-3 now wins
    wider = FakeTraining({1e-3: 0.99})
    with pytest.raises(FptError, match="bit-xor-full-lr was run with other options \\(--lr 0.0003 -> 0.001\\)"):
        run_reproduction(_plan(), tmp_path, progress=False, executor=wider)
    assert not (probes / "chosen.json").exists()  # so the first rates still run, unrefused
    again = FakeTraining({})
    run_reproduction(_plan((1e-4, 3e-4)), tmp_path, progress=False, executor=again)
    assert again.trained == [] and json.loads((probes / "chosen.json").read_text())["lr"] == 3e-4


def test_a_broken_probe_leaves_its_arm_unrun_and_the_rest_runs_until_it_is_fixed(tmp_path):
    broken = FakeTraining({1e-4: 0.8, 3e-4: 0.9, 3e-3: 0.95}, failures={1e-3: "usage"})
    rows, text = run_reproduction(_plan(), tmp_path, progress=False, executor=broken)
    assert ("fpt", 1, 3e-3) in broken.trained and not any(seed == 1 for arm, seed, _ in broken.trained if arm == "full")
    assert failure_summary(rows) == "1 of 5 runs failed [other errors: 1]"
    assert "no rate chosen yet (--lr-search: the probe at lr 0.001 failed (it broke)" in text
    assert "Failed runs:\n- task=bit-xor,variant=full,lr=0.001,seed=0: it broke" in text
    assert not (tmp_path / PROBES / "bit-xor-full-lr" / "chosen.json").exists()
    fixed = FakeTraining({1e-3: 0.99})
    rows, text = run_reproduction(_plan(), tmp_path, progress=False, executor=fixed)
    assert sorted(fixed.trained) == [("full", 0, 1e-3), ("full", 1, 1e-3)] and failure_summary(rows) is None
    assert table_row(text, "XOR", "full")[1].endswith(", at its own rate (0.001)")


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
