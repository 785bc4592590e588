"""How `fpt reproduce` sets up the paper's tables: the variants as the paper defines them, Table 6's
convergence, Table 12's rows, the split each cell holds, and a chart of ours beside the paper's."""

import json

import numpy as np
import pytest
from helpers import homology_records

from fpt.cli import main
from fpt.core.errors import TOO_SHALLOW, FptError
from fpt.experiments.cell_records import train_flags
from fpt.experiments.convergence import convergence, smoothed
from fpt.experiments.paper import FINETUNE_LR, PAPER_VARIANTS, VARIANTS
from fpt.experiments.reproduce import Reproduction, run_reproduction, table_rows
from fpt.experiments.sweep import run_sweep
from fpt.experiments.sweep_spec import load_spec, train_args
from fpt.experiments.tables import markdown_table, run_convergence, split_title, steps_table

# --- 1. full is a transformer trained from scratch; the fine-tune is its own variant -------------


def test_full_is_trained_from_scratch_and_finetune_fine_tunes_at_its_own_lr():
    assert VARIANTS["full"] == {"policy": "full", "init": "random"}
    assert VARIANTS["finetune"] == {"policy": "full", "init": "pretrained", "lr": FINETUNE_LR}
    assert FINETUNE_LR < 1e-3  # below the FPT's rate, which collapsed full fine-tunes to chance
    full = train_flags(train_args({"steps": 5}, {"task": "mnist", "variant": "full"}, PAPER_VARIANTS))
    assert full["--init"] == "random" and full["--policy"] == "full" and "--layers" not in full
    # the paper's Full on CIFAR-10 is a 3-layer GPT-2; a grid value still wins over the variant
    assert train_flags(train_args({}, {"task": "cifar10", "variant": "full"}, PAPER_VARIANTS))["--layers"] == "3"
    assert (
        train_flags(train_args({}, {"task": "cifar10", "variant": "full", "layers": 6}, PAPER_VARIANTS))["--layers"]
        == "6"
    )
    finetune = train_flags(train_args({"lr": 1e-3}, {"task": "bit-xor", "variant": "finetune"}, PAPER_VARIANTS))
    assert finetune["--init"] == "pretrained" and float(finetune["--lr"]) == FINETUNE_LR
    assert "finetune" in Reproduction(["table1"], tasks=["bit-xor"]).sweeps()[0][1].grid["variant"]


def test_random_init_builds_any_depth_and_pretrained_refuses_more_than_it_has(tiny_backbones):
    from fpt.backbones import backbone_depth, load_backbone

    bert = tiny_backbones["bert"]  # 2 blocks
    deep = load_backbone(bert, init="random", layers=5)
    assert len(deep.model.encoder.layer) == 5 and deep.model.config.num_hidden_layers == 5
    with pytest.raises(FptError, match="between 1 and 2 .*deeper backbone, or --init random") as error:
        load_backbone(bert, layers=5)
    assert error.value.kind == TOO_SHALLOW
    with pytest.raises(FptError, match="between 1 and 2"):
        load_backbone(bert, init="stats", layers=3)
    assert backbone_depth(bert) == 2 and backbone_depth("gpt2") == 12 and backbone_depth("gpt2-medium") == 24
    assert backbone_depth("someone/not-here") is None  # a hub id: unknown offline, never downloaded


# --- 2. Table 6: each run converges to its own plateau -------------------------------------------


def _history(accuracies, every=10):
    return [(every * (i + 1), a) for i, a in enumerate(accuracies)]


def test_a_run_that_plateaus_converges_where_it_reaches_its_plateau():
    curve = [0.5, 0.6, 0.7, 0.75] + [0.758] * 16  # Random on Bit Memory: a plateau at 75.8%
    result = convergence(_history(curve))
    assert result.converged and result.accuracy == pytest.approx(0.758)
    # the first mean of 3 within 1 point of the best: evaluations 3-5 (0.7, 0.75, 0.758) average
    # 0.736; 4-6 average 0.755 -> the run entered its plateau at the 4th evaluation, step 40 (the
    # window's first evaluation, not its last: step 60 would count two evaluations on the plateau)
    assert result.step == 40 and result.budget == 200


def test_a_run_still_rising_at_the_end_has_not_converged(tmp_path):
    rising = [0.5 + 0.025 * i for i in range(20)]
    result = convergence(_history(rising))
    assert not result.converged and result.why_not == "still improving at the end"
    assert "| fpt | not converged within 200 steps (0/1: still improving at the end)" in _steps_table(
        tmp_path, {"fpt": [rising]}
    )


def test_noise_does_not_decide_where_a_run_converged():
    # one lucky evaluation (0.95) early, then a noisy plateau around 0.90
    curve = [0.5, 0.7, 0.95, 0.8, 0.85] + [0.89, 0.91] * 7 + [0.9]
    result = convergence(_history(curve))
    assert result.converged and 0.895 <= result.accuracy <= 0.91
    # not the spike at step 30: the means of 3 around it (0.72 to 0.87) fall short; evaluations 6-8
    # (0.89, 0.91, 0.89) are the first window within 1 point of the best, entered at step 60
    assert result.step == 60
    assert smoothed([1, 2, 3, 4], 3) == [2, 3]
    assert not convergence(_history([0.5, 0.6, 0.7])).converged  # too few evaluations to tell


def _steps_table(folder, curves: dict) -> str:
    """Table 6 of runs whose held-out accuracies, every 10 steps, are `curves[variant][seed]`."""
    rows = []
    for variant, runs in curves.items():
        for seed, accuracies in enumerate(runs):
            run = folder / f"{variant}-{seed}-{len(list(folder.iterdir()))}"
            run.mkdir()
            (run / "metrics.jsonl").write_text(
                "".join(
                    json.dumps({"step": s, "split": "heldout", "accuracy": a}) + "\n" for s, a in _history(accuracies)
                )
            )
            rows.append(
                {
                    "task": "bit-memory",
                    "variant": variant,
                    "status": "done",
                    "step": 200,
                    "split": "heldout",
                    "eval_split": "heldout",
                    "run_dir": str(run),
                }
            )
    return steps_table(rows, "table6")


def test_table6_states_its_definition_and_gives_a_speedup_only_where_both_converged(tmp_path):
    fpt = [[0.5, 1.0] + [1.0] * 18, [0.5, 0.6, 1.0] + [1.0] * 17]
    random = [[0.5] * 10 + [0.758] * 10, [0.5] * 12 + [0.758] * 8]  # a lower plateau, later: 1x would be wrong
    table = _steps_table(tmp_path, {"fpt": fpt, "random": random})
    assert "Converged: at the first of the first 3 consecutive evaluations" in table and "held-out split" in table
    # fpt: the first 3-means within 1 point of 1.0 are those of evaluations 2-4 and 3-5 -> steps 20
    # and 30 (where each run reached 100%), median 25
    assert "| fpt | 25 (2/2 converged, to 100.0%) (paper 1e+04) |" in table
    assert "| random | 120 (2/2 converged, to 75.8%) (paper 4e+04) |" in table  # steps 110 and 130
    assert "| speedup random/fpt | 4.8x (paper 4.0x) |" in table
    rising = _steps_table(tmp_path, {"fpt": fpt, "random": [[0.5 + 0.025 * i for i in range(20)]]})
    assert "| speedup random/fpt | n/a (random not converged) (paper 4.0x) |" in rising


# --- 3. Table 12: every row of the paper, and the one a shallow backbone cannot give -------------


def test_table12_plans_the_papers_rows_and_marks_those_the_backbone_is_too_shallow_for(tiny_backbones):
    plan = Reproduction(["table12"], budget=10, seeds=2, backbone=tiny_backbones["bert"])  # 2 blocks
    sweeps = {folder: (spec, skipped) for folder, spec, skipped in plan.sweeps()}
    pretrained, too_deep = sweeps["listops-table12-output-only"]
    assert pretrained.grid["layers"] == [1] and pretrained.grid["variant"] == ["output-only"]
    assert sorted(r["layers"] for r in too_deep) == [3, 6, 12] and {r["failure"] for r in too_deep} == {TOO_SHALLOW}
    random, none = sweeps["listops-table12-random-output-only"]
    assert random.grid["layers"] == [12, 24] and not none  # random init: any depth, only a config
    # on MiniLM (6 layers) only the 12-layer pretrained row is out of reach
    minilm = {f: s for f, _, s in Reproduction(["table12"]).sweeps()}["listops-table12-output-only"]
    assert [r["layers"] for r in minilm] == [12] and "needs a 12-layer backbone; minilm has 6" in minilm[0]["error"]

    rows = [{**r, "sweep": "listops-table12-output-only"} for r in too_deep]
    rows += [
        {
            "task": "listops",
            "variant": v,
            "layers": k,
            "status": "done",
            "sweep": f"listops-table12-{v}",
            "split": "test",
            "accuracy:test": 0.2,
        }
        for v, k in [("output-only", 1), ("random-output-only", 12), ("random-output-only", 24)]
    ]
    table = markdown_table(table_rows("table12", rows), "table12", "table12", "row")
    assert "| pretrained, 1 layer | 20.0 (n=1) (paper 12) |" in table
    assert "| pretrained, 12 layers | needs a 12-layer backbone (paper 33) |" in table
    assert "| random, 24 layers | 20.0 (n=1) (paper 17) |" in table
    assert "| ListOps, test |" in table


# --- 4. every cell names its split; test splits are scored once at the end ---------------------


def test_columns_and_titles_name_the_split_they_report():
    rows = [
        {
            "task": "remote-homology",
            "variant": "fpt",
            "status": "done",
            "split": "test_fold_holdout",
            "accuracy:test_fold_holdout": 0.1,
            "accuracy:test_superfamily_holdout": 0.2,
            "accuracy:test_family_holdout": 0.3,
        },
        {"task": "listops", "variant": "fpt", "status": "done", "split": "test", "accuracy:test": 0.4},
    ]
    table = markdown_table(rows, "table1: " + split_title(rows), "table1")
    assert "### table1: test accuracy in %" in table
    assert (
        "| | ListOps, test | Homology, test (fold) | Homology, test (superfamily) | Homology, test (family) |" in table
    )
    assert "| fpt | 40.0 (n=1) (paper 38.4) | 10.0 (n=1) (paper 12.7) | 20.0 (n=1) (paper 12.7) |" in table
    assert "validation-split scores" in table  # the paper's ListOps and homology figures are not test scores
    bits = [{"task": "bit-xor", "variant": "fpt", "status": "done", "split": "heldout", "accuracy:heldout": 1.0}]
    assert "| | XOR, held-out |" in markdown_table(bits, "t", "table1")
    assert "split named in each column" in split_title(rows + bits)


@pytest.fixture
def homology_dir(tmp_path):
    folder = tmp_path / "homology" / "remote_homology"
    folder.mkdir(parents=True)
    for i, split in enumerate(
        ("train", "valid", "test_fold_holdout", "test_superfamily_holdout", "test_family_holdout")
    ):
        records = homology_records(6, seed=i)
        for r in records:
            r.pop("evolutionary")
        (folder / f"remote_homology_{split}.json").write_text(json.dumps(records))
    return folder.parent


@pytest.mark.slow
def test_a_sweep_scores_each_test_holdout_once_at_the_end(tiny_gpt2, homology_dir, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"grid:\n  task: [remote-homology]\noptions:\n  steps: 2\n  eval_every: 1\n  batch_size: 2\n"
        f"  max_len: 8\n  backbone: {tiny_gpt2}\n  data_dir: {homology_dir}\n"
    )
    (row,) = run_sweep(load_spec(spec, PAPER_VARIANTS), tmp_path / "sweep", progress=False)
    assert row["status"] == "done" and row["error"] == "" and row["eval_split"] == "valid"
    assert row["split"] == "test_fold_holdout"  # the first holdout, in the task's order
    holdouts = ("test_fold_holdout", "test_superfamily_holdout", "test_family_holdout")
    # the run scored them itself when it ended (summary.json "test"): the sweep reads them there
    summary = json.loads((tmp_path / "sweep" / "runs" / "task=remote-homology" / "summary.json").read_text())
    assert set(summary["test"]) == set(holdouts) and summary["step"] == 2
    assert [row[f"accuracy:{h}"] for h in holdouts] == [summary["test"][h]["accuracy"] for h in holdouts]
    # validation stays the curve watched during training
    metrics = (tmp_path / "sweep" / "runs" / "task=remote-homology" / "metrics.jsonl").read_text()
    assert metrics.count('"split": "valid"') == 2 and "holdout" not in metrics
    assert "| | Homology, test (fold) | Homology, test (superfamily) | Homology, test (family) |" in markdown_table(
        [row], "t", row_key="task"
    )


def test_evaluate_takes_the_splits_to_score(tiny_gpt2, tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "bit-xor",
                "--backbone",
                tiny_gpt2,
                "--steps",
                "1",
                "--eval-size",
                "8",
                "--no-progress",
                "--out",
                str(run),
            ]
        )
        == 0
    )
    assert main(["evaluate", str(run), "--splits", "heldout"]) == 0
    assert main(["evaluate", str(run), "--splits", "test"]) == 0  # the bit tasks' second fixed draw
    assert set(json.loads((run / "evaluation.json").read_text())["splits"]) == {"test"}
    assert main(["evaluate", str(run), "--splits", "valid"]) == 2
    assert "has no split valid; it has heldout, test" in capsys.readouterr().err
    np.savez(
        tmp_path / "rows.npz",
        x=np.random.default_rng(0).normal(size=(20, 3, 2)).astype(np.float32),
        y=np.arange(20) % 2,
    )
    held = tmp_path / "held"
    assert (
        main(
            [
                "train",
                "--task",
                f"npz:{tmp_path / 'rows.npz'}",
                "--backbone",
                tiny_gpt2,
                "--steps",
                "1",
                "--no-progress",
                "--out",
                str(held),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["evaluate", str(held), "--splits", "test"]) == 2
    assert "has no test split (it has heldout); use --splits all" in capsys.readouterr().err


# --- 5. a chart of ours beside the paper's, for each table, in the report ------------------------


@pytest.mark.slow
def test_each_table_gets_a_chart_beside_the_paper_and_the_report_shows_it(tiny_gpt2, tmp_path):
    plan = Reproduction(
        ["table1", "table6"],
        tasks=["bit-xor"],
        budget=4,
        seeds=1,
        backbone=tiny_gpt2,
        skip_variants=("full", "lstm", "finetune"),
        options={"eval_size": 8, "eval_every": 1},
    )
    out = tmp_path / "r"
    run_reproduction(plan, out, progress=False)
    assert (out / "table1.png").read_bytes()[:4] == b"\x89PNG"
    table1 = (out / "table1.md").read_text()
    assert "![table1: ours beside the paper's figures](table1.png)" in table1
    assert "| | XOR, test |" in table1  # the bit tasks keep a test set apart from the held-out one
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert 'alt="table1: ours beside the paper&#x27;s figures"' in page
    assert page.count("data:image/png;base64,") >= 2  # the chart and the learning curves, inline
    assert '<table id="results">' in page and '<table id="results-2">' in page  # every table, not the first only


def test_charts_draw_bars_with_error_bars_beside_the_papers_figures(tmp_path):
    from matplotlib.image import imread

    from fpt.experiments.plots import steps_chart, table_chart

    rows = [
        {"task": t, "variant": v, "status": "done", "split": "test", "accuracy:test": a}
        for t in ("mnist", "listops")
        for v, a in (("fpt", 0.9), ("fpt", 0.8), ("random", 0.5))
    ]
    assert table_chart(rows, tmp_path / "t.png", "t", "table2") == tmp_path / "t.png"
    assert imread(tmp_path / "t.png").std() > 0.05
    assert table_chart([{**r, "status": "failed"} for r in rows], tmp_path / "none.png", "t") is None
    assert not (tmp_path / "none.png").exists()
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "accuracy": 0.5}) + "\n" for s in (1, 2, 3)))
    assert steps_chart([{**rows[0], "run_dir": str(run)}], tmp_path / "s.png", "t") is None  # none converged


def test_learning_curves_keep_the_subset_scores_in_between_and_the_whole_split_where_a_step_has_it():
    from fpt.experiments.plots import curve_points

    records = [
        {"step": 50, "split": "test[:1000]", "accuracy": 0.2, "examples": 1000},
        {"step": 100, "split": "test[:1000]", "accuracy": 0.4, "examples": 1000},
        {"step": 100, "split": "test", "accuracy": 0.39, "examples": 10000},  # a target confirmed
        {"step": 200, "split": "test", "accuracy": 0.5, "examples": 10000},
    ]
    points = curve_points(records)
    assert [(p["step"], p["split"]) for p in points] == [(50, "test[:1000]"), (100, "test"), (200, "test")]


def test_a_flat_run_at_chance_has_not_converged_but_a_plateau_above_it_has(tiny_gpt2, tmp_path):
    # Random init on Bit XOR sits at 50% for thousands of steps before it learns (the paper: 2e4):
    # a flat curve at chance is a run that has not started, not one that converged.
    at_chance = _history([0.49, 0.51, 0.5, 0.516, 0.5] * 4)
    result = convergence(at_chance, chance=(0.5, 1000))
    assert not result.converged and result.why_not == "never left chance (50.0%)"
    assert convergence(at_chance).converged  # without the chance level it looked like a plateau
    plateau = _history([0.5, 0.6, 0.7, 0.75] + [0.758] * 16)  # Bit Memory's random init: 75.8%
    assert convergence(plateau, chance=(0.5, 500)).converged
    with pytest.raises(ValueError):
        convergence(at_chance, chance=(0.5, 0))
    # a run stuck on MNIST's most frequent digit (11.35% of the test set) is at chance, not above 1/10
    stuck = _history([0.1135] * 20)
    assert not convergence(stuck, chance=(0.1135, 10000)).converged
    # every evaluation records its split's majority share, and Table 6 reads it from the run
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "bit-xor",
                "--backbone",
                tiny_gpt2,
                "--steps",
                "1",
                "--eval-size",
                "8",
                "--no-progress",
                "--out",
                str(run),
            ]
        )
        == 0
    )
    record = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert 0.5 <= record["majority_share"] <= 1 and record["examples"] == 8
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({**record, "step": s, "accuracy": a}) + "\n" for s, a in at_chance)
    )
    assert run_convergence(run).why_not.startswith("never left chance")


def test_a_run_scored_only_on_its_subset_so_far_still_gets_a_curve(tmp_path):
    from fpt.experiments.plots import learning_curves

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "split": "test[:2000]", "accuracy": a, "examples": 2000}) + "\n"
            for s, a in [(500, 0.8), (1000, 0.9)]
        )
    )
    rows = [{"task": "mnist", "variant": "fpt, fast recipe", "status": "done", "run_dir": str(run)}]
    assert learning_curves(rows, tmp_path / "curves.png") is not None and (tmp_path / "curves.png").stat().st_size
