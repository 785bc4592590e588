"""`fpt reproduce m3` and `fpt reproduce tourism` (issue 60): fpt and its controls on each subset of a
competition, the baselines scored by one run per subset, and the tables (sMAPE, MASE, OWA) written from
the run files beside the published figures."""

from __future__ import annotations

import json
import statistics

import pytest
from helpers import one_line_error

from fpt.cli import main
from fpt.experiments.cell_records import train_flags
from fpt.experiments.competition_tables import competition_markdown, read_subset_runs
from fpt.experiments.paper import CONTROL_ARMS, PAPER_VARIANTS, VARIANTS
from fpt.experiments.reproduce import Reproduction
from fpt.experiments.sweep_spec import train_args

M3 = ["yearly", "quarterly", "monthly", "other"]
THETA = {"yearly": 16.90, "quarterly": 8.96, "monthly": 13.85, "other": 4.41, "all": 13.01}


def _cell_flags(spec) -> dict[str, dict[str, str]]:
    """Each cell's `fpt train` flags by its name (a flag without a value: "on")."""
    return {c.name: train_flags(train_args(spec.options, c.values, PAPER_VARIANTS)) for c in spec.cells()}


def test_m3_runs_every_arm_of_every_subset_and_scores_the_baselines_once_per_subset():
    plan = Reproduction(["m3"], seeds=3, budget=3000)
    plan.check()
    sweeps = plan.sweeps()
    assert [folder for folder, _, _ in sweeps] == [f"m3-{s}" for s in M3]
    for (_, spec, skipped), subset in zip(sweeps, M3):
        assert not skipped
        flags = _cell_flags(spec)
        assert sorted(flags) == sorted(f"{arm}-seed{k}" for arm in CONTROL_ARMS for k in range(3))
        assert [name for name, f in flags.items() if f.get("--baselines") == "on"] == ["fpt-seed0"]
        assert all("--no-baselines" in f for name, f in flags.items() if name != "fpt-seed0")
        for name, f in flags.items():
            # benchmarks/m3_fpt.py's recipe: fast, a tenth of the budget (at most 100) to warm up
            assert f["--task"] == f"m3:{subset}" and f["--recipe"] == "fast" and f["--steps"] == "3000"
            assert f["--warmup-steps"] == "100" and f["--eval-every"] == "600" and f["--dropout"] == "0.0"
            arm = name.rsplit("-", 1)[0]
            assert {k: f[f"--{k}"] for k in VARIANTS[arm]} == {k: str(v) for k, v in VARIANTS[arm].items()}
    assert [folder for folder, _, _ in Reproduction(["tourism"]).sweeps()] == [
        "tourism-yearly",
        "tourism-quarterly",
        "tourism-monthly",
    ]


def test_the_baselines_follow_the_first_arm_run_and_set_gives_them_to_every_cell_or_none():
    plan = Reproduction(["m3"], tasks=["m3:other"], seeds=2, budget=20, skip_variants=("fpt",))
    plan.check()
    ((_, spec, skipped),) = plan.sweeps()
    assert [r["variant"] for r in skipped] == ["fpt"]
    flags = _cell_flags(spec)
    assert [name for name, f in flags.items() if "--baselines" in f] == ["random-seed0"]
    assert flags["random-seed0"]["--warmup-steps"] == "2"  # a tenth of a small budget
    for value, flag in ((True, "--baselines"), (False, "--no-baselines")):  # as --set reads true, false
        plan = Reproduction(["m3"], tasks=["m3:other"], seeds=2, options={"baselines": value})
        plan.check()
        ((_, spec, _),) = plan.sweeps()
        assert all(flag in f for f in _cell_flags(spec).values())
    plan = Reproduction(["m3"], tasks=["m3:other"], options={"recipe": "paper"})
    plan.check()
    ((_, spec, _),) = plan.sweeps()
    assert {(f["--recipe"], f["--dropout"], f["--warmup-steps"]) for f in _cell_flags(spec).values()} == {
        ("paper", "0.1", "0")
    }


def test_an_unknown_subset_is_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["reproduce", "m3", "--tasks", "m3:weekly", "--out", str(out), "--no-progress"]) == 2
    err = one_line_error(capsys)
    assert "m3 has no task m3:weekly" in err and "m3:other" in err and not out.exists()


def _write_run(root, subset: str, arm: str, seed: int, smape: float, baselines: dict | None = None):
    """A finished run's files as `fpt train --task m3:SUBSET` writes them (what the tables read)."""
    run = root / f"m3-{subset}" / "runs" / f"{arm}-seed{seed}"
    run.mkdir(parents=True)
    config = {"task": f"m3:{subset}", "model": "fpt", "body": "backbone", "init": "pretrained", "policy": "fpt"}
    config.update(VARIANTS[arm], seed=seed, backbone="minilm", recipe="fast")
    if config["body"] != "backbone":
        config["policy"] = "full"  # as a control's run records it
    (run / "config.json").write_text(json.dumps(config))
    series, horizon = SHAPES[subset]
    test = {"split": "test", "loss": 0.1, "mse": 0.1, "mae": 0.1, "examples": series, "series": series}
    test.update(smape=smape, mase=smape / 10, mase_left_out=0, smape_naive2=20.0, mase_naive2=2.0)
    test["owa"] = 0.5 * (smape / 20.0 + smape / 10 / 2.0)
    summary = {"step": 30, "final": {**test, "split": "val"}, "test": {"test": test}}
    summary["task_notes"] = {"horizon": horizon}
    summary.update(trained_params=10, total_params=100, wall_time_s=1.0, status="completed")
    if baselines is not None:
        scores = {name: {**test, "smape": value, "mase": value / 10} for name, value in baselines.items()}
        summary["baselines"] = {"split": "test", "metric": "smape", "seconds": 1.0, "scores": scores, "missing": []}
    (run / "summary.json").write_text(json.dumps(summary))


SHAPES = {"yearly": (645, 6), "quarterly": (756, 8), "monthly": (1428, 18), "other": (174, 8)}


def _row(text: str, table: str, label: str) -> list[str]:
    """The cells of a table's row, under its '#### TABLE' heading."""
    block = text.split(f"#### {table}")[1].split("####")[0]
    line = next(line for line in block.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")][1:]


def test_tables_weigh_each_forecast_value_once_and_name_each_columns_winner(tmp_path, capsys):
    fpt = {"yearly": (16.5, 17.5), "quarterly": (9.0, 9.5), "monthly": (13.0, 14.0), "other": (5.0, 6.0)}
    theta = {"yearly": 16.5, "quarterly": 9.2, "monthly": 13.8, "other": 4.9}
    for subset in M3:
        for seed, smape in enumerate(fpt[subset]):
            _write_run(tmp_path, subset, "fpt", seed, smape, {"Theta": theta[subset]} if seed == 0 else None)
            _write_run(tmp_path, subset, "random", seed, smape + 1)
    text = competition_markdown("m3", read_subset_runs(tmp_path), "m3", skipped=("full",))
    weights = [SHAPES[s][0] * SHAPES[s][1] for s in M3]
    by_seed = [sum(w * fpt[s][k] for w, s in zip(weights, M3)) / sum(weights) for k in (0, 1)]
    expected = f"{statistics.mean(by_seed):.2f} ± {statistics.stdev(by_seed):.2f} (n=2)"
    assert _row(text, "sMAPE", "fpt") == [
        *(f"{statistics.mean(fpt[s]):.2f} ± {statistics.stdev(fpt[s]):.2f} (n=2)" for s in M3),
        expected,
    ]
    theta_all = sum(w * theta[s] for w, s in zip(weights, M3)) / sum(weights)
    assert _row(text, "sMAPE", "Theta (baseline)") == [*(f"{theta[s]:.2f}" for s in M3), f"{theta_all:.2f}"]
    published = _row(text, "sMAPE", "Theta, published (Makridakis & Hibon 2000)")
    assert published == [f"{THETA[c]:.2f}" for c in [*M3, "all"]]
    assert _row(text, "MASE", "Theta (baseline)")[0] == f"{theta['yearly'] / 10:.3f}"
    assert "Theta, published" not in text.split("#### MASE")[1]  # a published sMAPE is no MASE
    assert _row(text, "sMAPE", "none")[0] == "not run: no finished run in these files"
    assert _row(text, "sMAPE", "full") == ["skipped for time (--skip-variants)", "—", "—", "—", "—"]
    assert "yearly: Theta (a baseline, 16.50); quarterly: Theta (a baseline, 9.20); monthly: fpt (fpt, 13.50)" in text
    assert "fpt wins 2 of 5 columns" in text.split("#### MASE")[0]
    assert main(["competitions", str(tmp_path)]) == 0
    rebuilt = text.replace("skipped for time (--skip-variants)", "not run: no finished run in these files")
    assert capsys.readouterr().out == rebuilt  # from the files alone, which do not say what was skipped
    _write_run(tmp_path / "again", "other", "fpt", 0, 5.0)
    assert main(["competitions", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("fpt: error: m3:other: two runs of fpt seed 0")


def _runs(out) -> dict[str, dict]:
    return {p.name: json.loads((p / "summary.json").read_text()) for p in sorted((out / "m3-other" / "runs").iterdir())}


@pytest.mark.slow
def test_reproduce_m3_writes_every_arm_beside_the_baselines_and_resumes_without_retraining(tiny_gpt2, tmp_path):
    out = tmp_path / "out"
    argv = ["reproduce", "m3", "--tasks", "m3:other", "--seeds", "2", "--budget", "2", "--backbone", tiny_gpt2]
    argv += ["--out", str(out), "--no-progress", "--set", "precision=fp32"]
    assert main(argv) == 0
    text = (out / "m3.md").read_text()
    runs = _runs(out)
    assert sorted(runs) == sorted(f"{arm}-seed{k}" for arm in CONTROL_ARMS for k in (0, 1))
    assert [name for name, summary in runs.items() if "baselines" in summary] == ["fpt-seed0"]
    assert all(summary["step"] == 2 for summary in runs.values())
    for arm in CONTROL_ARMS:
        values = [runs[f"{arm}-seed{k}"]["test"]["test"]["smape"] for k in (0, 1)]
        other = _row(text, "sMAPE", arm)[3]
        assert other == f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f} (n=2)", arm
    baselines = runs["fpt-seed0"]["baselines"]["scores"]
    assert set(baselines) >= {"Naive2", "Theta", "AutoETS"}
    for name, scores in baselines.items():
        assert _row(text, "OWA", f"{name} (baseline)")[3] == f"{scores['owa']:.3f}"
    assert _row(text, "sMAPE", "Theta, published (Makridakis & Hibon 2000)")[3] == "4.41"
    assert "Lowest sMAPE (%) per column" in text and "other: " in text
    stamps = {p: p.stat().st_mtime_ns for p in (out / "m3-other").rglob("*") if p.is_file() and "logs" not in p.parts}
    logs = {p: p.stat().st_size for p in (out / "m3-other" / "logs").iterdir()}
    assert main(argv) == 0  # every cell finished: nothing is trained or scored again
    assert {p: p.stat().st_size for p in (out / "m3-other" / "logs").iterdir()} == logs
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items() if "runs" in p.parts)
    assert (out / "m3.md").read_text() == text


def test_budget_search_probes_the_first_arms_seed_0_per_budget_then_runs_each_subset_at_its_choice():
    plan = Reproduction(["m3"], tasks=["m3:other"], seeds=2, skip_variants=("fpt",), budget_search=[1000, 3000])
    plan.check()
    ((task, folder, spec, budgets),) = plan.budget_probe_sweeps()
    assert (task, folder, budgets) == ("m3:other", "budget-probes/m3-other", [1000, 3000])
    flags = _cell_flags(spec)
    assert sorted(flags) == ["random-steps1000", "random-steps3000"]  # fpt skipped: the first arm run
    assert {n: (f["--steps"], f["--warmup-steps"], f["--eval-every"]) for n, f in flags.items()} == {
        "random-steps1000": ("1000", "100", "200"),
        "random-steps3000": ("3000", "100", "600"),
    }
    assert all(f["--seed"] == "0" and "--no-baselines" in f and f["--init"] == "random" for f in flags.values())
    assert plan.sweeps(budgets={}) == []  # a subset with no budget chosen yet is not run
    ((_, chosen, _),) = plan.sweeps(budgets={"m3:other": 3000})
    assert {(f["--steps"], f["--eval-every"]) for f in _cell_flags(chosen).values()} == {("3000", "600")}


@pytest.mark.parametrize(
    "argv, said",
    [
        (["m3", "--budget-search", "1000"], "--budget-search takes two or more different step counts"),
        (["m3", "--budget-search", "5,5"], "--budget-search takes two or more different step counts"),
        (["m3", "--budget-search", "0,3"], "--budget-search takes two or more different step counts"),
        (["m3", "--budget-search", "1k,3k"], "--budget-search takes two or more different step counts"),
        (["m3,controls", "--budget-search", "2,3"], "--budget-search is for the m3 and tourism tables alone"),
        (["m3", "--budget-search", "2,3", "--set", "steps=4"], "leave out --set steps"),
    ],
)
def test_a_budget_search_that_cannot_run_is_one_line(argv, said, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["reproduce", *argv, "--out", str(out), "--no-progress"]) == 2
    assert said in one_line_error(capsys) and not out.exists()


def _write_probe(root, steps: int, val_smape: float | None):
    """A budget probe's files (`fpt train --task m3:other --steps N`); None: one that has not finished."""
    run = root / "budget-probes" / "m3-other" / "runs" / f"fpt-steps{steps}"
    run.mkdir(parents=True)
    config = {"task": "m3:other", "model": "fpt", "body": "backbone", "init": "pretrained", "policy": "fpt"}
    (run / "config.json").write_text(json.dumps({**config, "seed": 0, "steps": steps}))
    if val_smape is not None:
        final = {"split": "val", "loss": 0.1, "mse": 0.1, "mae": 0.1, "examples": 174, "smape": val_smape}
        summary = {"step": steps, "final": final, "trained_params": 1, "total_params": 2, "wall_time_s": 1.0}
        (run / "summary.json").write_text(json.dumps(summary))


def test_the_budget_with_the_lowest_validation_smape_wins_and_the_rebuilt_table_says_so(tmp_path, capsys):
    _write_run(tmp_path, "other", "fpt", 0, 5.0, {"Theta": 4.9})
    for steps, smape in ((100, 7.0), (300, 6.5), (900, 6.5)):  # a tie: the fewer steps
        _write_probe(tmp_path, steps, smape)
    assert main(["competitions", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "- m3:other: 300 steps (val sMAPE 100 steps: 7.00; 300 steps: 6.50; 900 steps: 6.50)" in text
    assert "was chosen on validation (--budget-search, below)" in text
    assert "fpt-steps" not in text and _row(text, "sMAPE", "fpt")[3] == "5.00 (n=1)"  # probes are no arm's runs
    _write_probe(tmp_path, 2700, None)
    assert main(["competitions", str(tmp_path)]) == 0
    assert "- m3:other: no budget chosen yet, so not run: the probe of 2700 steps did not finish" in (
        capsys.readouterr().out
    )


@pytest.mark.slow
def test_reproduce_m3_chooses_each_subsets_budget_on_validation_and_keeps_its_probes(tiny_gpt2, tmp_path):
    out = tmp_path / "out"
    argv = ["reproduce", "m3", "--tasks", "m3:other", "--seeds", "1", "--budget-search", "1,3", "--backbone"]
    argv += [tiny_gpt2, "--skip-variants", "random,none,attention,block,full", "--out", str(out), "--no-progress"]
    assert main([*argv, "--set", "precision=fp32"]) == 0
    probes = out / "budget-probes" / "m3-other" / "runs"
    val = {int(p.name.rsplit("steps", 1)[1]): json.loads((p / "summary.json").read_text()) for p in probes.iterdir()}
    assert sorted(val) == [1, 3] and not any("baselines" in summary for summary in val.values())
    best = min(val, key=lambda steps: (val[steps]["final"]["smape"], steps))
    (run,) = (out / "m3-other" / "runs").iterdir()
    assert json.loads((run / "summary.json").read_text())["step"] == best
    text = (out / "m3.md").read_text()
    assert f"- m3:other: {best} steps (val sMAPE 1 steps: {val[1]['final']['smape']:.2f}; " in text
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")}
    assert main([*argv, "--set", "precision=fp32"]) == 0  # the probes and the run are kept, the choice the same
    assert {p: p.stat().st_mtime_ns for p in out.rglob("summary.json")} == stamps
    assert (out / "m3.md").read_text() == text
