"""`fpt reproduce forecasting` and `fpt reproduce uea` (issue 31): the runs each table makes, and
its text: our test scores (each run's test split scored once, at its end) beside the published figures."""

import json
from pathlib import Path

import pytest
from helpers import write_ett_csv

from fpt.cli import main
from fpt.core.errors import FptError
from fpt.experiments.paper import FORECAST_HORIZONS, PAPER_VARIANTS
from fpt.experiments.reproduce import Reproduction
from fpt.experiments.sweep_spec import train_args
from fpt.tasks import task_options


def _flags(args):
    return {flag: value for flag, value in zip(args, args[1:] + [""]) if flag.startswith("--")}


def test_forecasting_runs_every_task_variant_and_horizon_and_set_picks_one_horizon():
    sweeps = Reproduction(["forecasting"], seeds=2).sweeps()
    assert [folder for folder, _, _ in sweeps] == ["ett-ETTh1", "ett-ETTh2"]
    for (_, spec, _), task in zip(sweeps, ["ett:ETTh1", "ett:ETTh2"]):
        assert spec.grid == {
            "task": [task],
            "variant": ["fpt", "random", "linear"],
            "horizon": FORECAST_HORIZONS,
            "seed": [0, 1],
        }
    linear = _flags(
        train_args(sweeps[0][1].options, {"task": "ett:ETTh1", "variant": "linear", "horizon": 336}, PAPER_VARIANTS)
    )
    assert linear["--model"] == "linear" and linear["--horizon"] == "336"
    random = _flags(
        train_args(sweeps[0][1].options, {"task": "ett:ETTh1", "variant": "random", "horizon": 96}, PAPER_VARIANTS)
    )
    assert random["--init"] == "random" and random["--policy"] == "fpt"
    plan = Reproduction(["forecasting"], tasks=["ett:ETTh2"], seeds=1, options={"horizon": "24"})
    plan.check()
    ((folder, spec, _),) = plan.sweeps()
    assert folder == "ett-ETTh2" and spec.grid["horizon"] == [24]
    with pytest.raises(FptError, match="has no task ETTh1"):
        Reproduction(["forecasting"], tasks=["ETTh1"]).check()


def test_uea_holds_out_validation_from_train_and_set_overrides_it():
    sweeps = Reproduction(["uea"], seeds=1).sweeps()
    assert {folder: spec.options["val_size"] for folder, spec, _ in sweeps} == {
        "ucr-JapaneseVowels": 50,
        "ucr-BasicMotions": 8,
    }
    assert all(spec.grid["variant"] == ["fpt", "random"] for _, spec, _ in sweeps)
    plan = Reproduction(["uea"], tasks=["ucr:BasicMotions"], options={"val_size": "4"})
    plan.check()
    ((_, spec, _),) = plan.sweeps()
    assert spec.options["val_size"] == 4
    assert task_options("ucr:BasicMotions", {})["dataset"] == "BasicMotions"  # --task ucr:NAME names the set


def _runs(sweep: Path) -> list[Path]:
    return sorted(p for p in (sweep / "runs").iterdir() if p.is_dir())


@pytest.mark.slow
def test_reproduce_forecasting_prints_test_mse_mae_beside_published_figures(tiny_gpt2, tmp_path):
    write_ett_csv(tmp_path / "data" / "ETTh1.csv", hours=14500)
    out = tmp_path / "out"
    argv = [
        "reproduce",
        "forecasting",
        "--tasks",
        "ett:ETTh1",
        "--budget",
        "2",
        "--seeds",
        "1",
        "--backbone",
        tiny_gpt2,
        "--out",
        str(out),
        "--no-progress",
    ]
    for option in (f"data_dir={tmp_path / 'data'}", "lookback=48", "horizon=96", "patch_size=8", "patch_stride=4"):
        argv += ["--set", option]
    assert main(argv) == 0
    text = (out / "forecasting.md").read_text()
    assert "test MSE / MAE (lower is better)" in text and "| | ETTh1, H=96 | ETTh1, avg |" in text
    runs = _runs(out / "ett-ETTh1")
    assert len(runs) == 3  # fpt, random, linear at horizon 96
    for run in runs:
        variant = json.loads((run / "config.json").read_text())
        summary = json.loads((run / "summary.json").read_text())
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert summary["final"]["split"] == "val" and not any(r.get("split") == "test" for r in records)
        test = summary["test"]["test"]  # the test split, scored once as the run ended
        assert test["examples"] == 7 * (2880 + 48 - 48 - 96 + 1)  # every window of every channel
        label = "linear" if variant.get("model") == "linear" else "random" if variant["init"] == "random" else "fpt"
        row = next(line for line in text.splitlines() if line.startswith(f"| {label} |"))
        assert f"{test['mse']:.3f} / {test['mae']:.3f} (n=1)" in row
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ")}
    assert "published 0.375 / 0.399 (DLinear paper)" in rows["| linear"]
    assert "published 0.423 / 0.437 (One Fits All DLinear)" in rows["| linear"]
    assert "published 0.427 / 0.426 (One Fits All GPT2(6))" in rows["| fpt"]
    assert "needs horizons 96/192/336/720 (ran 96)" in rows["| fpt"]
    assert rows["| random"].count("published: —") == 2
    assert "not run here; published 0.413 / 0.430 (PatchTST, in One Fits All's Table 3)" in rows["| PatchTST"]


@pytest.mark.slow
def test_reproduce_uea_prints_test_accuracy_beside_published_figures(tiny_gpt2, tmp_path):
    out = tmp_path / "out"
    assert (
        main(
            [
                "reproduce",
                "uea",
                "--tasks",
                "ucr:BasicMotions",
                "--budget",
                "2",
                "--seeds",
                "1",
                "--backbone",
                tiny_gpt2,
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    text = (out / "uea.md").read_text()
    assert "test accuracy in %" in text and "--val-size: BasicMotions 8" in text
    for run in _runs(out / "ucr-BasicMotions"):
        summary = json.loads((run / "summary.json").read_text())
        assert summary["final"]["split"] == "val" and summary["test"]["test"]["examples"] == 40
        accuracy = 100 * summary["test"]["test"]["accuracy"]
        assert f"| {accuracy:.1f} (n=1); published: —" in text
    assert "98.6" not in text  # JapaneseVowels' figure, not run here
