"""`fpt reproduce controls` (issue 32): the runs it plans (every arm under one recipe), the table it
writes from run files alone, and a tiny end-to-end run whose controls train only what they say."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from helpers import table_row, table_row_line, write_arm_run

from fpt.cli import build_parser, main
from fpt.core.errors import FptError
from fpt.experiments.controls import (
    arm_of,
    controls_markdown,
    direction,
    read_arm_runs,
    step_seconds,
)
from fpt.experiments.paper import CONTROL_ARMS, CONTROLS_TITLE, PAPER_VARIANTS, VARIANTS
from fpt.experiments.reproduce import Reproduction
from fpt.experiments.shuffled import SHUFFLE_FILE
from fpt.experiments.sweep_spec import train_args
from fpt.training.config import TrainConfig

ARM_KEYS = ("policy", "init", "body", "seed")  # what may differ between the arms of one task


def _resolved(options: dict, values: dict) -> dict:
    """A cell's `fpt train` arguments read by fpt's own parser and resolved as a run resolves them
    (the recipe filled in): every field of the config the run writes, less its task options."""
    given = vars(build_parser().parse_args(["train", *train_args(options, values, PAPER_VARIANTS)]))
    names = {f.name for f in dataclasses.fields(TrainConfig)} - {"task_options"}
    fields = {k: v for k, v in given.items() if k in names and v is not None}
    return vars(TrainConfig.from_recipe(fields.pop("recipe", "paper"), **fields))


@pytest.mark.parametrize("recipe", ["fast", "paper"])
def test_every_arm_of_every_task_runs_under_one_recipe_and_budget(recipe):
    plan = Reproduction(
        ["controls"],
        tasks=["bit-xor", "ucr:JapaneseVowels", "ett:ETTh1"],
        seeds=3,
        budget=400,
        options={"recipe": recipe},
    )
    plan.check()
    sweeps = plan.sweeps()
    assert [folder for folder, _, _ in sweeps] == ["bit-xor", "ucr-JapaneseVowels", "ett-ETTh1"]
    for _, spec, skipped in sweeps:
        assert not skipped
        assert spec.grid["variant"] == CONTROL_ARMS and spec.grid["seed"] == [0, 1, 2]
        cells = spec.cells()
        assert len(cells) == len(CONTROL_ARMS) * 3
        resolved = {(c.values["variant"], c.values["seed"]): _resolved(spec.options, c.values) for c in cells}
        fpt = resolved[("fpt", 0)]
        assert fpt["steps"] == 400 and fpt["recipe"] == recipe
        for (arm, seed), config in resolved.items():
            differ = {k for k in config if config[k] != fpt[k]}
            assert differ <= set(ARM_KEYS), (arm, differ)
            assert config["seed"] == seed
            bundle = {"body": "backbone", "init": "pretrained", "policy": "fpt", **VARIANTS[arm]}
            assert {k: config[k] for k in bundle} == bundle
    # the fast recipe's dropout (0) would otherwise reach only the frozen arms
    dropout = {c.values["variant"]: _resolved(sweeps[0][1].options, c.values)["dropout"] for c in sweeps[0][1].cells()}
    assert set(dropout.values()) == {0.0 if recipe == "fast" else 0.1}


def test_task_options_reach_their_task_and_set_wins():
    plan = Reproduction(
        ["controls"], tasks=["ucr:JapaneseVowels", "ett:ETTh1"], options={"recipe": "fast", "dropout": "0.2"}
    )
    plan.check()
    (_, vowels, _), (_, ett, _) = plan.sweeps()
    assert vowels.options["val_size"] == 50 and vowels.options["znorm"] is False and "horizon" not in vowels.options
    assert ett.options["horizon"] == 96 and "val_size" not in ett.options
    assert vowels.options["dropout"] == 0.2 and ett.options["dropout"] == 0.2
    args = train_args(vowels.options, {"task": "ucr:JapaneseVowels", "variant": "none", "seed": 0}, PAPER_VARIANTS)
    assert "--no-znorm" in args and args[args.index("--body") + 1] == "none"
    with pytest.raises(FptError, match="has no task cifar10"):
        Reproduction(["controls"], tasks=["cifar10"]).check()


def test_arm_of_names_each_arm_from_its_config_and_nothing_else():
    for arm in CONTROL_ARMS:
        config = {"task": "bit-xor", "model": "fpt", "body": "backbone", "init": "pretrained", "policy": "fpt"}
        assert arm_of({**config, **VARIANTS[arm]}) == arm
    assert arm_of({"body": "attention", "init": "pretrained", "policy": "full"}) == "attention"  # as a run records it
    assert arm_of({"model": "lstm"}) is None
    assert arm_of({"policy": "output-only", "init": "pretrained", "body": "backbone"}) is None
    assert arm_of({"policy": "full", "init": "pretrained", "body": "backbone"}) is None  # finetune


def test_step_seconds_is_the_median_interval_between_evaluations():
    records = [
        {"step": 10, "elapsed_s": 50.0},  # the first interval carries the start-up
        {"step": 20, "elapsed_s": 52.0},
        {"step": 20, "elapsed_s": 53.0},  # a whole-split record after a subset one: the first counts
        {"step": 30, "elapsed_s": 55.0},
        {"step": 40, "elapsed_s": 58.0},
    ]
    assert step_seconds(records) == pytest.approx(0.3)
    assert step_seconds([{"step": 10, "elapsed_s": 5.0}]) == pytest.approx(0.5)
    assert step_seconds([]) is None


def test_direction_counts_a_gap_only_beyond_its_spread():
    assert direction([-10.0, -12.0, -11.0], "accuracy") == "worse"
    assert direction([-1.0, 1.0, -0.5], "accuracy") == "no clear difference"
    assert direction([3.0, 2.0, 4.0], "accuracy") == "better"
    assert direction([0.05, 0.06, 0.04], "mse") == "worse"  # a higher MSE is worse
    assert direction([-0.05, -0.06], "mse") == "better"
    assert direction([-0.05], "mse") == "one seed: no spread to judge by"  # not "better": nothing to weigh it by


def test_a_shuffled_drop_says_how_many_runs_it_is_over(tmp_path):
    root = tmp_path / "committed"
    for seed in range(2):
        write_arm_run(root / "runs", "fpt", seed, 1.0, 0.5, 500)
    write_arm_run(root / "runs", "block", 0, 1.0, 0.4, 900)
    write_arm_run(root / "runs", "block", 1, 0.9, None, 900)  # not scored on shuffled inputs
    text = controls_markdown(read_arm_runs(root), note="")
    assert "(shuffled minus ordered, points, mean over seeds): fpt -50; block -60 (n=1 of 2)." in text


def test_the_table_is_written_from_run_files_alone(tmp_path):
    root = tmp_path / "committed"
    for seed, (fpt, none) in enumerate([(1.0, 0.5), (0.98, 0.52), (0.99, 0.48)]):
        write_arm_run(root / "bit-xor" / "runs", "fpt", seed, fpt, 0.5, 500)
        write_arm_run(root / "bit-xor" / "runs", "none", seed, none, None, 300)
    write_arm_run(root / "bit-xor" / "runs", "block", 0, 1.0, 0.5, 900)
    (root / "bit-xor" / "runs" / "not-a-run").mkdir()
    write_arm_run(root / "other", "fpt", 0, 0.7, 0.6, 500, task="bit-memory")
    runs = read_arm_runs(root)
    assert sorted((r.task, r.arm, r.seed) for r in runs)[:3] == [
        ("bit-memory", "fpt", 0),
        ("bit-xor", "block", 0),
        ("bit-xor", "fpt", 0),
    ]
    text = controls_markdown(runs, note="Ran on a test.")
    fpt = table_row(text, "XOR", "fpt")
    assert (
        fpt[2] == "99.0 ± 1.0 (n=3)"
        and fpt[3] == "50.0 ± 0.0"
        and fpt[4] == "500"
        and fpt[5] == "0.200"
        and fpt[6] == "—"
    )
    none = table_row(text, "XOR", "none")
    assert none[2] == "50.0 ± 2.0 (n=3)" and none[3] == "not scored" and none[4] == "300"
    assert none[6] == "-49.0 ± 2.6"  # paired by seed: -50, -46, -51
    block = table_row(text, "XOR", "block")
    assert block[2] == "100.0 (n=1)" and block[6] == "0.0"  # its seed 0 against fpt's seed 0 alone
    assert (
        "| XOR | none | removing the LLM did as well or better | -49.0 ± 2.6 (n=3) | worse | no: worse than fpt |"
        in text
    )
    assert "| XOR | block | " in text and "0.0 (n=1) | one seed: no spread to judge by | not judged |" in text
    assert "Shuffled inputs on XOR (shuffled minus ordered, points, mean over seeds): fpt -49; block -50." in text
    assert "not run: no finished run in these files" in table_row_line(text, "XOR", "attention")
    assert "Ran on a test." in text and "Bit Memory" in text
    # the same text from the command line, from the files alone
    out = tmp_path / "controls.md"
    chart = tmp_path / "c.png"
    assert main(["controls", str(root), "--out", str(out), "--note", "Ran on a test.", "--chart", str(chart)]) == 0
    assert out.read_text() == text
    assert chart.read_bytes().startswith(b"\x89PNG")
    from fpt.experiments.plots import controls_digest, png_description

    assert png_description(chart) == controls_digest(runs, CONTROLS_TITLE)
    assert controls_digest(runs[1:]) != controls_digest(runs)  # another set of runs, another picture
    import fpt.experiments.plots as plots

    drawn_before = controls_digest(runs)
    plots.CONTROLS_CHART_LOOK += 1  # the drawing code changed: a picture drawn before is not current
    try:
        assert controls_digest(runs) != drawn_before
    finally:
        plots.CONTROLS_CHART_LOOK -= 1
    from fpt.experiments.plots import controls_chart

    assert controls_chart([], tmp_path / "empty.png") is None and not (tmp_path / "empty.png").exists()


def test_a_run_that_cannot_be_scored_on_shuffled_inputs_is_left_out_with_why(tmp_path, monkeypatch, capsys):
    import fpt.experiments.shuffled as shuffled
    from fpt.experiments.reproduce import _controls_text

    # seed 0: copied in from another machine (no checkpoint, never scored); 1: scored; 2: its checkpoint here
    for seed, score in enumerate([None, 0.5, None]):
        write_arm_run(tmp_path, "fpt", seed, 0.9, score, 500)
    runs = sorted(tmp_path.iterdir())
    (runs[2] / "checkpoint.safetensors").write_bytes(b"")
    scored = []
    monkeypatch.setattr(shuffled, "_score_in_child", lambda run_dir, seed: scored.append(run_dir))
    assert shuffled.score_shuffled(runs) == {runs[0]: "no checkpoint here, and no shuffled.json made at its last step"}
    assert scored == [runs[2]]  # seed 1's file is current: not scored again
    # a shuffled.json of another step is not current: without a checkpoint the run stays unscored
    current = json.loads((runs[1] / SHUFFLE_FILE).read_text())
    (runs[1] / SHUFFLE_FILE).write_text(json.dumps({**current, "step": 10}))
    assert list(shuffled.score_shuffled(runs[:2])) == runs[:2]
    (runs[1] / SHUFFLE_FILE).write_text(json.dumps(current))
    # the command's last step: a warning naming each run left out, the column counting what it has
    monkeypatch.undo()
    rows = [{"status": "done", "run_dir": str(run)} for run in runs]
    text = _controls_text(rows, "Ran on a test.", 3, tmp_path / "controls.png")
    assert table_row(text, "XOR", "fpt")[3] == "50.0 (n=1 of 3)"  # not the mean of three
    warnings = capsys.readouterr().err.strip().splitlines()
    assert warnings[0] == (
        f"fpt: warning: {runs[0]}: not scored on shuffled inputs (no checkpoint here, and no shuffled.json "
        "made at its last step); the table leaves it out of that column"
    )
    # seed 2's checkpoint is no checkpoint: its own scoring process said why, and the table was written
    assert str(runs[2]) in warnings[1] and "corrupt or truncated" in warnings[1]


@pytest.mark.parametrize(
    "fraction, task",
    [(None, "bit-xor"), (1, "bit-xor"), (1.0, "bit-xor"), (0.1, "bit-xor (few-shot: 10% of train)")]
    + [(0.05, "bit-xor (few-shot: 5% of train)"), (1 / 3, "bit-xor (few-shot: 33.33% of train)")],
)
def test_a_controls_task_names_the_share_of_its_training_split(fraction, task):
    from fpt.experiments.controls import controls_task

    assert controls_task({"task": "bit-xor", "train_fraction": fraction}) == task


def test_runs_on_a_share_of_the_training_split_are_a_task_of_their_own(tmp_path):
    for seed in range(2):
        write_arm_run(tmp_path / "all", "fpt", seed, 0.9, None, 500)
        write_arm_run(tmp_path / "few", "fpt", seed, 0.6, None, 500)
    for run in (tmp_path / "few").iterdir():  # the same task, seeds and arm, trained on 10% of its split
        config = json.loads((run / "config.json").read_text())
        (run / "config.json").write_text(json.dumps({**config, "train_fraction": 0.1}))
    runs = read_arm_runs(tmp_path)  # not refused as two runs of fpt seed 0, nor pooled
    assert sorted({r.task for r in runs}) == ["bit-xor", "bit-xor (few-shot: 10% of train)"]
    text = controls_markdown(runs)
    assert table_row(text, "XOR:", "fpt")[2] == "90.0 ± 0.0 (n=2)"
    assert table_row(text, "XOR (few-shot: 10% of train):", "fpt")[2] == "60.0 ± 0.0 (n=2)"
    # two shares that print alike are two settings: refused, not averaged in one row
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "train_fraction": 0.1000001}))
    with pytest.raises(FptError, match="runs made with other task options"):
        read_arm_runs(tmp_path)


def test_a_near_perfect_arm_is_never_printed_as_perfect(tmp_path):
    from fpt.core.scores import places
    from fpt.experiments.plots import controls_figure

    assert places("accuracy", [99.7, 75.1]) == 1 and places("accuracy", [99.96, 75.1]) == 2
    assert places("accuracy", [100.0, 99.94]) == 1  # a perfect score is 100.0; 99.94 is 99.9
    assert places("mse", [0.4]) == 3
    # Bit Memory's full arm: 99.93, 99.98 and 99.95 would be "100.0 ± 0.0" at one place
    for seed, (fpt, full) in enumerate([(0.9973, 0.9993), (0.9965, 0.9998), (0.9969, 0.9995)]):
        write_arm_run(tmp_path, "fpt", seed, fpt, None, 500, task="bit-memory")
        write_arm_run(tmp_path, "full", seed, full, None, 9000, task="bit-memory")
    runs = read_arm_runs(tmp_path)
    text = controls_markdown(runs)
    assert table_row(text, "Bit Memory", "full")[2] == "99.95 ± 0.03 (n=3)"
    assert table_row(text, "Bit Memory", "fpt")[2] == "99.69 ± 0.04 (n=3)"  # the task's block shares its places
    assert table_row(text, "Bit Memory", "full")[6] == "0.26 ± 0.07"  # paired: 0.20, 0.33, 0.26
    (panel,) = [ax for ax in controls_figure(runs).axes if ax.get_visible()]
    assert {"99.69 ± 0.04", "99.95 ± 0.03"} <= {t.get_text() for t in panel.texts}


def test_a_step_time_from_a_gpu_says_so_beside_cpu_runs(tmp_path):
    for seed in (0, 1):
        write_arm_run(tmp_path, "fpt", seed, 0.97, None, 500, task="mnist", device=None)  # an older run: no key
        write_arm_run(tmp_path, "full", seed, 0.98, None, 9000, task="mnist", device="cuda:0" if seed else "cpu")
        write_arm_run(tmp_path, "block", seed, 0.96, None, 900, task="mnist", device="cuda:0")
    text = controls_markdown(read_arm_runs(tmp_path))
    assert table_row(text, "MNIST", "full")[5] == "0.200 (1 of 2 on cuda:0)"
    assert table_row(text, "MNIST", "block")[5] == "0.200 (on cuda:0)"
    assert table_row(text, "MNIST", "fpt")[5] == "0.200"


def test_a_gap_is_not_rounded_down_by_float_error():
    from fpt.experiments.controls import mean_std

    gaps = [100 * 0.9851 - 100 * 0.9806, 100 * 0.9861 - 100 * 0.9816]  # as the table makes them: 0.44999...
    assert min(gaps) < 0.45 and mean_std(gaps, 1) == "0.5 ± 0.0" and mean_std([0.44], 1) == "0.4"


def test_the_controls_picture_draws_each_arm_at_its_mean_with_the_figures_beside_it(tmp_path):
    import matplotlib.pyplot as plt

    from fpt.experiments.plots import controls_figure

    for seed, (fpt, none) in enumerate([(0.99, 0.50), (0.98, 0.52), (0.97, 0.48)]):
        write_arm_run(tmp_path, "fpt", seed, fpt, 0.5, 500)
        write_arm_run(tmp_path, "none", seed, none, None, 300)
    write_arm_run(tmp_path, "block", 0, 0.996, None, 900)
    fig = controls_figure(read_arm_runs(tmp_path))
    (panel,) = [ax for ax in fig.axes if ax.get_visible()]
    widths = sorted(round(bar.get_width(), 6) for bar in panel.patches)
    assert widths == [50.0, 98.0, 99.6]  # none's mean, fpt's, block's: the bars, in accuracy points
    texts = [t.get_text() for t in panel.texts]
    # the figures beside each bar, as the table writes them: a gap of a tenth shows even near 100
    assert texts.count("not run") == 3 and "98.0 ± 1.0" in texts and "50.0 ± 2.0" in texts and "99.6" in texts
    assert panel.get_xlim() == (0.0, 100.0)
    plt.close(fig)
    assert controls_figure([]) is None


def test_an_arm_that_never_beat_the_majority_label_is_flagged_and_not_judged(tmp_path):
    # from scratch at the recipe's rate, JapaneseVowels' full arm stayed at chance: its gap measures the
    # rate, not what the blocks are worth
    for seed, (fpt, full, none) in enumerate([(0.97, 0.11, 0.50), (0.96, 0.24, 0.52), (0.97, 0.10, 0.20)]):
        write_arm_run(tmp_path, "fpt", seed, fpt, None, 500, majority=0.24)
        write_arm_run(tmp_path, "full", seed, full, None, 9000, majority=0.24)
        write_arm_run(tmp_path, "none", seed, none, None, 300, majority=0.24)  # above it on two seeds: it learned
    text = controls_markdown(read_arm_runs(tmp_path), note="")
    assert table_row(text, "XOR", "full")[2] == "15.0 ± 7.8, at or below the majority label's 24.0 (n=3)"
    assert table_row(text, "XOR", "none")[2] == "40.7 ± 17.9 (n=3)"
    assert "| XOR | full | " in text and text.split("| XOR | full | ")[1].splitlines()[0].endswith(
        "| worse | not judged: it did not learn here (every run at or below the majority label) |"
    )
    assert text.split("| XOR | none | ")[1].splitlines()[0].endswith("| worse | no: worse than fpt |")


def test_a_set_named_by_option_or_by_prefix_is_one_task(tmp_path):
    """`--task ucr --dataset X` (a headline run copied in as the fpt arm) and `--task ucr:X` (the
    controls' own runs) land in one table, apart from another set."""
    write_arm_run(tmp_path, "fpt", 0, 0.97, None, 500, task="ucr", options={"dataset": "JapaneseVowels"})
    write_arm_run(
        tmp_path, "none", 0, 0.90, None, 300, task="ucr:JapaneseVowels", options={"dataset": "JapaneseVowels"}
    )
    write_arm_run(tmp_path, "fpt", 1, 0.80, None, 500, task="ucr", options={"dataset": "BasicMotions"})
    assert sorted((r.task, r.arm) for r in read_arm_runs(tmp_path)) == [
        ("ucr:BasicMotions", "fpt"),
        ("ucr:JapaneseVowels", "fpt"),
        ("ucr:JapaneseVowels", "none"),
    ]
    assert table_row(controls_markdown(read_arm_runs(tmp_path), note=""), "ucr:JapaneseVowels", "none")[6] == "-7.0"
    # the same set z-normalised is another setting: refused, not averaged into the raw runs' row
    options = {"dataset": "JapaneseVowels", "znorm": True, "data_dir": "/elsewhere"}
    write_arm_run(tmp_path, "fpt", 2, 0.78, None, 500, task="ucr", options=options)
    with pytest.raises(FptError, match="ucr:JapaneseVowels: runs made with other task options"):
        read_arm_runs(tmp_path)


def test_a_run_from_before_cutoff_and_one_at_cutoff_0_are_one_setting_and_backtest_origins_are_not_peers(tmp_path):
    write_arm_run(tmp_path, "fpt", 0, 0.9, None, 500, task="m3:monthly", options={"lookback": None})
    write_arm_run(tmp_path, "fpt", 1, 0.8, None, 500, task="m3:monthly", options={"lookback": None, "cutoff": 0})
    # a backtest's origin inside seed 0's run: the same arm and seed at another cutoff, not a third run
    origin = tmp_path / "task=m3:monthly,variant=fpt,seed=0" / "backtest" / "origin-2"
    write_arm_run(tmp_path, "fpt", 0, 0.7, None, 500, task="m3:monthly", options={"cutoff": 18}, run=origin)
    assert sorted(r.seed for r in read_arm_runs(tmp_path)) == [0, 1]
    write_arm_run(tmp_path, "fpt", 2, 0.7, None, 500, task="m3:monthly", options={"lookback": None, "cutoff": 18})
    with pytest.raises(FptError, match="m3:monthly: runs made with other task options"):
        read_arm_runs(tmp_path)


def test_no_runs_is_one_line(tmp_path, capsys):
    assert main(["controls", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "fpt: error: no finished controls runs found; run `fpt reproduce controls` first"
    ]
    # a folder where a file to write is asked for: one line before anything is read or drawn
    assert main(["controls", str(tmp_path), "--chart", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"fpt: error: {tmp_path} is a folder: name a file to write"]


def test_an_output_that_cannot_be_written_is_one_line_and_nothing_half_written(tmp_path, capsys, monkeypatch):
    write_arm_run(tmp_path / "runs", "fpt", 0, 0.9, None, 100)
    (tmp_path / "a-file").write_text("")
    chart = tmp_path / "controls.png"
    out = tmp_path / "a-file" / "deeper" / "t.md"
    assert main(["controls", str(tmp_path / "runs"), "--out", str(out), "--chart", str(chart)]) == 2
    said = f"{tmp_path / 'a-file'} is a file, not a folder; name a file in a folder"
    assert capsys.readouterr().err.strip().splitlines() == [f"fpt: error: cannot write {out}: {said}"]
    assert not chart.exists()  # refused before the picture was drawn
    if os.geteuid() != 0:  # root writes anywhere: no folder refuses it
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert main(["controls", str(tmp_path / "runs"), "--out", str(locked / "t.md")]) == 2
        assert f"{locked} is not writable; name a file elsewhere" in capsys.readouterr().err
    # missing folders are made, as for any file fpt writes
    out = tmp_path / "new" / "folder" / "t.md"
    assert main(["controls", str(tmp_path / "runs"), "--out", str(out), "--chart", str(chart)]) == 0
    assert "| fpt |" in out.read_text() and chart.exists()

    # a refusal only the write meets (a full disk, say): still one line, no traceback
    def refuse(path, text):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr("fpt.core.paths.write_text", refuse)
    assert main(["controls", str(tmp_path / "runs"), "--out", str(tmp_path / "t.md")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"fpt: error: cannot write {tmp_path / 't.md'}: No space left on device"
    ]


@pytest.mark.slow
def test_reproduce_controls_end_to_end_trains_each_arm_only_what_it_says(tiny_gpt2, tmp_path):
    out = tmp_path / "out"
    argv = ["reproduce", "controls", "--tasks", "bit-xor", "--budget", "2", "--seeds", "1", "--backbone", tiny_gpt2]
    argv += ["--out", str(out), "--no-progress", "--set", "recipe=fast"]
    for option in ("n_bits=4", "eval_size=8", "batch_size=4", "eval_every=1", "warmup_steps=0"):
        argv += ["--set", option]
    assert main(argv) == 0
    runs = {r.arm: r for r in read_arm_runs(out)}
    assert sorted(runs) == sorted(CONTROL_ARMS)
    for arm, run in runs.items():
        config = json.loads((run.path / "config.json").read_text())
        assert config["dropout"] == 0.0 and config["lr"] == 3e-3 and config["steps"] == 2, arm
        mixed = json.loads((run.path / SHUFFLE_FILE).read_text())
        summary = json.loads((run.path / "summary.json").read_text())
        ordered, shuffled = mixed["splits"]["test"]["ordered"], mixed["splits"]["test"]["shuffled"]
        assert mixed["step"] == 2 and ordered == summary["test"]["test"]
        assert shuffled["examples"] == ordered["examples"] == 8 and run.shuffled == 100 * shuffled["accuracy"]
        assert run.step_s is not None
    hidden = 32  # the tiny GPT-2 (tests/conftest.py)
    trained = {arm: run.trained_params for arm, run in runs.items()}
    total = json.loads((runs["full"].path / "summary.json").read_text())["total_params"]
    assert trained["random"] == trained["fpt"] and trained["full"] == total > trained["fpt"]
    # one attention layer: query, key, value and output (weights and biases) and its layer norm
    assert trained["attention"] - trained["none"] == 4 * (hidden * hidden + hidden) + 2 * hidden
    # one GPT-2 block: two layer norms, attention (c_attn 3h, c_proj h) and an MLP of 4h
    block = 2 * 2 * hidden + (hidden * 3 * hidden + 3 * hidden) + (hidden * hidden + hidden)
    block += (hidden * 4 * hidden + 4 * hidden) + (4 * hidden * hidden + hidden)
    assert trained["block"] - trained["none"] == block  # the final layer norm (ln_f): in both
    text = (out / "controls.md").read_text()
    for arm in CONTROL_ARMS:
        assert f"| {arm} | " in text
    assert "](controls.png)" in text and (out / "controls.png").read_bytes().startswith(b"\x89PNG")
    assert "Tan et al." in text and "s/step" in text
