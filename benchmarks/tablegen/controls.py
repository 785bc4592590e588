"""The controls (benchmarks/results/controls/ and its probes): the `controls`, `controls-head` and
`controls-full-rate` tables of benchmarks/controls.md, and the controls table's picture, CONTROLS_CHART."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from .common import RESULTS, _json, _markdown, _rate

CONTROLS_CHART = "benchmarks/results/controls/controls.png"  # under the root: the controls table's picture

# Where the controls ran; every figure of the table is read from the run folders by fpt.experiments.controls.
CONTROLS_NOTE = (
    "Ran on one core of an AMD EPYC (fp32 but MNIST, Fashion-MNIST and ListOps, which ran in bf16; each run's "
    "CPU, with or without native bf16, is in its sittings.jsonl where it has one), shared "
    "with other jobs: the s/step column "
    "measures that contention as much as the arms and is not a benchmark timing. XOR's budget: 100 steps of one "
    "fixed recipe (--recipe fast with a 20-step warm-up), the same for every arm, chosen for the time there was, not "
    "on validation and not at convergence: a short budget favours the arm that learns fastest (Lu et al.'s Table 6: "
    "fpt converges on XOR in about 500 steps, the frozen random transformer in about 2e4). ETTh1 (ett:ETTh1, "
    "look-back 336, horizon 96, channel-independent, MSE / MAE on scaled values): the recipe and budget of the "
    "headline forecasts (--recipe fast, fp32, 1,500 steps, not tuned for forecasts), whose three runs "
    "(headline/etth1-96-fpt-fast1500-seed{0,1,2}) are its fpt arm, copied unchanged into the controls folder; "
    "its shuffled inputs permute each look-back window's 336 time steps before patching. ETTh1 (few-shot: 10% of "
    "train): the same command, recipe and budget with --set train_fraction=0.1, One Fits All's few-shot share: the "
    "first 10% of the training windows (the earliest months; the scaler still fitted on every training row), about "
    "8.4 epochs of them in 1,500 steps, no early stopping, validation and test unchanged, every arm (fpt too) "
    "trained by the command. Bit Memory and "
    "JapaneseVowels (raw series, 50 training series held out as val): the clean headline recipes (--recipe fast, "
    "fp32, 1,000 steps; Bit Memory at a "
    "constant rate), chosen on validation for fpt and given unchanged to every arm; the headline runs are the fpt "
    "arm where they exist (Bit Memory's three, JapaneseVowels' seed 0). MNIST: the 30-minute headline cell's recipe "
    "and budget (7x7 patches, --recipe fast in bf16, 13,000 steps, 5,000 training images held out as val), whose "
    "three runs (headline/mnist-fpt-fast13k-patch7-val5k-bf16-seed{0,1,2}, two threads on two idle cores) are its "
    "fpt arm; the other arms bf16 on one shared core. Fashion-MNIST: MNIST's recipe and budget, unchanged and not "
    "tuned for it, every arm (fpt too) trained by the command. Their full arm (bf16 too, each task's rate chosen "
    "on val) trained on lent GPUs, as its s/step column says: seed 0 of each and MNIST's seed 2 on an NVIDIA H100, "
    "not scored on shuffled inputs (the checkpoints stayed on that machine); the other seeds on an NVIDIA H200, "
    "scored there. ListOps (the official code's input: brackets "
    "stripped, cut to 512 tokens): the converged run's recipe and budget (--recipe fast in bf16, 1,000 steps of 32 "
    "in micro-batches of 8, the first 500 val expressions watched every 50 steps), whose run "
    "(converge/listops-fpt-fast-paper-protocol-seed0) is its fpt arm's seed 0, copied unchanged; fpt's seeds 1 and 2, "
    "the random arm and the full arm (its rate chosen on val) trained on a lent NVIDIA H200 (bf16 is native there, "
    "as on the CPU of seed 0 and of the other arms' runs; fpt's seeds loaded the package's MiniLM weights, their "
    "backbone_hash equal to seed 0's); scored on its test split where the paper quotes val. The none arm keeps "
    "fpt's last-token head, so on a "
    "classification task it reads one token (Tan et al.'s w/o LLM reads every patch through a forecasting "
    "head, as ETTh1's none does): the table after this one gives none a head reading every token. On "
    "JapaneseVowels, full trains every weight from scratch at the shared rate (3e-3), at which it learns nothing: "
    "its row measures that rate, and the second table after this one gives it rates of its own; on every other "
    "task it trained at a rate of its own (XOR's shared-rate runs, at chance too, are kept in "
    "benchmarks/results/controls_full_shared_rate/). A shuffled score over fewer runs than the arm's (n=k of 3) "
    "leaves out runs whose checkpoint stayed on the machine that trained them: benchmarks/results/controls/README.md "
    "says which, and where every run trained."
)


def controls_table() -> str:
    from fpt.experiments.controls import controls_markdown, read_arm_runs
    from fpt.experiments.rate_search import probe_section, read_choices

    root = RESULTS / "controls"  # with how each arm given its own rate (--lr-search) had it chosen
    chart = Path(CONTROLS_CHART).relative_to("benchmarks").as_posix()  # from benchmarks/controls.md
    picture = f"![The controls as a picture: each arm's test score per task, its seeds, its shuffled score]({chart})"
    return (
        controls_markdown(read_arm_runs(root), note=CONTROLS_NOTE)
        + f"\n{picture}\n"
        + probe_section(read_choices(root))
    )


def draw_controls_chart(path: Path) -> None:
    """The controls table's picture, from the same run files as the table."""
    from fpt.experiments.controls import read_arm_runs
    from fpt.experiments.plots import controls_chart

    controls_chart(read_arm_runs(RESULTS / "controls"), path)


def controls_chart_is_current(path: Path) -> bool:
    """Whether the picture at `path` was drawn from the run files the controls table is read from."""
    from fpt.experiments.controls import read_arm_runs
    from fpt.experiments.plots import controls_digest, png_description

    return png_description(path) == controls_digest(read_arm_runs(RESULTS / "controls"))


# The none arm keeps fpt's last-token head, so it reads one token; these runs give it a head reading
# every token instead (--pooling flatten), at the same recipe, budget and seeds as the controls' runs.
HEAD_PROBES = {"mnist": "mnist-none-flatten-seed*", "ucr:JapaneseVowels": "japanese-vowels-none-flatten-seed*"}


def _scores(runs) -> str:
    return _scores_of([run.score for run in runs], 2) if runs else "not run"


def _shuffled_evaluation(run) -> float | None:
    """A run's test accuracy (%) on shuffled tokens from `fpt evaluate --shuffle tokens` (evaluation.json),
    or None where it was not scored so, or was scored at another step than the run's last."""
    path = run.path / "evaluation.json"
    evaluation = _json(path) if path.is_file() else {}
    scores = evaluation.get("shuffled", {}).get("splits", {}).get(run.split)
    if evaluation.get("step") != run.steps or scores is None:
        return None
    return 100 * scores["accuracy"]


# What a head probe may differ in from the none arm's run of the same seed: its head, and the threads
# (the controls sweep records its one thread; a plain fpt train records none).
PROBE_MAY_DIFFER = {"pooling", "threads"}


def _check_probe(probe, arm_runs, may_differ: set[str] = PROBE_MAY_DIFFER) -> None:
    """Exit naming the settings where a probe run is not its seed's run of the arm (`arm_runs`) but
    for `may_differ` (a head probe: its head)."""
    for run in arm_runs:
        if run.seed == probe.seed:
            ours, theirs = _json(probe.path / "config.json"), _json(run.path / "config.json")
            keys = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
            if set(keys) - may_differ:
                sys.exit(
                    f"{probe.path}: differs from {run.path} in {', '.join(keys)}; rerun it with the cell's arguments"
                )


def controls_head_table() -> str:
    from fpt.experiments.controls import read_arm_run, read_arm_runs

    controls = read_arm_runs(RESULTS / "controls")
    rows = []
    for task, pattern in HEAD_PROBES.items():
        found = (read_arm_run(path) for path in sorted((RESULTS / "controls_flatten").glob(pattern)))
        flatten = [run for run in found if run is not None and run.task == task]  # finished runs of this task
        shuffled = [score for score in map(_shuffled_evaluation, flatten) if score is not None]
        arm = {name: [r for r in controls if r.task == task and r.arm == name] for name in ("fpt", "none")}
        for probe in flatten:
            _check_probe(probe, arm["none"])
        rows.append(
            [
                f"`{task}`",
                _scores(arm["fpt"]),
                _scores(arm["none"]),
                _scores(flatten),
                f"{statistics.mean(shuffled):.1f} (n={len(shuffled)})" if shuffled else "-",
                f"{flatten[0].trained_params:,}" if flatten else "-",
            ]
        )
    header = [
        "task (test accuracy %)",
        "fpt",
        "none, the last token's head",
        "none, a head reading every token",
        "the latter on shuffled tokens",
        "its trained params",
    ]
    return _markdown(header, rows)


# JapaneseVowels' full arm (every weight from scratch) at rates of its own, chosen on val: at the shared
# recipe's 3e-3 it stays at chance. Each run is its seed's controls run but for the rate (and threads).
FULL_RATE_PROBES = "japanese-vowels-full-lr*-seed*"


def _rate_row(label: str, runs, chosen: str) -> list[str]:
    finals = [_json(run.path / "summary.json")["final"] for run in runs]
    val = [100 * final["accuracy"] for final in finals]
    loss = [final["loss"] for final in finals]
    return [label, chosen, _scores_of(val), _scores_of(loss, 3), _scores(runs)]


def _scores_of(values: list[float], digits: int = 1) -> str:
    from fpt.experiments.controls import mean_std

    return f"{mean_std(values, digits)} (n={len(values)})"


def controls_full_rate_table() -> str:
    from fpt.experiments.controls import read_arm_run, read_arm_runs
    from fpt.experiments.rate_search import val_key

    task = "ucr:JapaneseVowels"
    controls = [r for r in read_arm_runs(RESULTS / "controls") if r.task == task]
    shared = [r for r in controls if r.arm == "full"]
    probes = [r for r in map(read_arm_run, sorted((RESULTS / "controls_full_lr").glob(FULL_RATE_PROBES))) if r]
    by_rate: dict[float, list] = {}
    for probe in probes:
        _check_probe(probe, shared, {"lr", "threads"})
        by_rate.setdefault(_json(probe.path / "config.json")["lr"], []).append(probe)
    # the rate chosen as --lr-search chooses: seed 0's final val accuracy, then its val loss, then the lower rate
    seed0 = {rate: r.path for rate, runs in by_rate.items() for r in runs if r.seed == 0}
    chosen = min(seed0, key=lambda rate: (val_key(seed0[rate]), rate)) if seed0 else None
    rows = [_rate_row("fpt, the shared recipe's 3e-3", [r for r in controls if r.arm == "fpt"], "-")]
    rows.append(_rate_row("full, the shared recipe's 3e-3", shared, "-"))
    for rate in sorted(by_rate):
        rows.append(
            _rate_row(f"full, {_rate(rate)}", by_rate[rate], "yes, on seed 0's val" if rate == chosen else "no")
        )
    header = ["arm, rate", "chosen", "val accuracy % (50 series)", "val loss", "test accuracy %"]
    return _markdown(header, rows)
