"""`fpt reproduce controls` (issue 32): is the pretrained transformer doing anything?

fpt and each control (fpt.experiments.paper.CONTROL_ARMS) are trained under one recipe and budget
by `fpt reproduce controls` (fpt.experiments.reproduce), which also scores each finished run on its
test inputs shuffled (fpt.experiments.shuffled, as `fpt evaluate --shuffle tokens`, written to the
run's shuffled.json); here the table is written from the run folders alone (`read_arm_runs`,
`controls_markdown`): `fpt controls FOLDER [--out FILE] [--chart FILE.png]`
rebuilds it (and its picture, fpt.experiments.plots.controls_chart) from committed result files, with
no checkpoint needed.

Per task and arm: the score on the test split scored once at the end (accuracy in %, or a
forecast's MSE / MAE), the same on shuffled inputs, the trained parameters, the median seconds per
step, and the gap to fpt (arm minus fpt, paired by seed) with its spread; then Tan et al.'s direction
of effect beside ours, per task, by a rule stated in the text.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fpt.core.errors import FptError
from fpt.core.paths import nearest_existing
from fpt.core.scores import headline_metric, is_regression, places
from fpt.experiments.paper import CONTROL_ARMS, CONTROLS_TITLE, VARIANTS, task_heading
from fpt.experiments.rate_search import (
    PROBES,
    controls_task,
    own_rates,
    probe_section,
    read_choices,
    task_order,
    training_share,
)
from fpt.experiments.shuffled import current_shuffle_file
from fpt.training.run_dir import RunDir

# task options that say where the data lies or checksum it, not what the task is: the same task either way
TASK_OPTIONS_SAME = ("data_dir", "sha256")
# task options added later, at the value that changes nothing: a run recorded before them lacks the key,
# one after holds that value, and the two are one setting (`--cutoff 0`: every observation kept)
TASK_OPTIONS_NEUTRAL = {"cutoff": 0}

ARM_TEXTS = {
    "fpt": "frozen pretrained blocks (fpt)",
    "random": "the same blocks at a random init, frozen (Lu et al.'s Random)",
    "full": "the same architecture from scratch, every weight trained (Lu et al.'s Full)",
    "none": "no blocks: input layer, positions, head (Tan et al.'s w/o LLM)",
    "attention": "one fresh self-attention layer, trained (Tan et al.'s LLM2Attn)",
    "block": "one fresh block of the backbone's architecture, trained (Tan et al.'s LLM2Trsf)",
}
# What Tan et al. (NeurIPS 2024) found for the arm that corresponds to ours, on forecasting.
TAN_ET_AL = {
    "none": "removing the LLM did as well or better",
    "attention": "replacing the LLM with one attention layer did as well or better",
    "block": "replacing the LLM with one transformer block did as well or better",
    "full": "the LLM trained from scratch did as well as the pretrained one",
}
TAN_SUMMARY = (
    'Tan et al. ("Are Language Models Actually Useful for Time Series Forecasting?", NeurIPS 2024), on '
    "One Fits All, Time-LLM and CALF over 13 forecasting sets: removing the language model, or replacing it "
    "with one attention layer or one transformer block, did as well or better in most cases; the models "
    "trained from scratch did no worse than the pretrained ones; and shuffling the input hurt the LLM-based "
    "models no more than the ablations (paraphrased from the paper)."
)


def arm_of(config: dict) -> str | None:
    """The controls arm a run's config.json trained, or None for any other run: a control by its
    body (whose run records the policy "full": it trains every parameter it has), else the
    VARIANTS bundle of CONTROL_ARMS it matches."""
    values = {"body": "backbone", "init": "pretrained", "policy": "fpt", "model": "fpt", **config}
    if values["model"] != "fpt":
        return None
    if values["body"] != "backbone":
        return values["body"] if values["body"] in CONTROL_ARMS and values["init"] == "pretrained" else None
    for arm in CONTROL_ARMS:
        bundle = {"body": "backbone", "init": "pretrained", "policy": "fpt", **VARIANTS[arm]}
        if all(values.get(k) == v for k, v in bundle.items()):
            return arm
    return None


@dataclass
class ArmRun:
    """One finished run of the controls table, read from its folder."""

    task: str
    arm: str
    seed: int
    backbone: str
    split: str
    metric: str  # "accuracy" (in %, higher is better) or "mse" (lower is better)
    score: float
    mae: float | None
    shuffled: float | None  # the same metric on shuffled inputs; None where the run was not scored on them
    trained_params: int
    step_s: float | None  # median seconds per step between evaluations (evaluation time included)
    steps: int
    recipe: str
    path: Path
    task_options: str = "{}"  # the task's options as sorted JSON, less where its data lies (TASK_OPTIONS_SAME)
    majority: float | None = None  # accuracy's floor: the split's most frequent label's share, in %
    lr: float | None = None  # its learning rate (the table gives it where the arm had its own, --lr-search)
    device: str = "cpu"  # where it trained (config.json): a step time off the CPU is marked so in the table


def step_seconds(records: list[dict]) -> float | None:
    """The median of (seconds / steps) between successive evaluations in metrics.jsonl: training
    steps plus the evaluation each interval ends with (the run files time nothing finer)."""
    first = {}
    for record in records:
        if "elapsed_s" in record:
            first.setdefault(int(record["step"]), float(record["elapsed_s"]))
    points = sorted(first.items())
    rates = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in zip(points, points[1:]) if s1 > s0]
    if not rates and points and points[0][0] > 0:
        rates = [points[0][1] / points[0][0]]
    return statistics.median(rates) if rates else None


def _first_test(summary: dict, evaluation: dict | None) -> tuple[str, dict]:
    """The split the table reports and its result: the first test split the run scored once at its
    end, else one `fpt evaluate` scored, else the split it was watched on."""
    from fpt.experiments.tables import split_order

    for tested in (summary.get("test") or {}, (evaluation or {}).get("splits") or {}):
        tests = {k: v for k, v in tested.items() if k == "test" or k.startswith("test_")}
        if tests:
            split = min(tests, key=split_order)
            return split, tests[split]
    final = summary["final"]
    return final["split"], final


def read_arm_run(run_dir: Path) -> ArmRun | None:
    """A finished controls run from its files, or None (not finished, or not a controls arm)."""
    run = RunDir(run_dir)
    if not run.config_path.is_file():
        return None
    config = run.read_config()
    summary = run.read_summary()
    arm = arm_of(config)
    if summary is None or arm is None:
        return None
    split, result = _first_test(summary, run.read_evaluation())
    metric = headline_metric(result)
    scale = 1.0 if is_regression(result) else 100.0
    shuffled = None
    mixed = current_shuffle_file(run_dir, summary)
    if mixed is not None and split in mixed.get("splits", {}):
        shuffled = scale * mixed["splits"][split]["shuffled"][metric]
    return ArmRun(
        task=controls_task(config),  # one task, one block of the table
        arm=arm,
        seed=int(config.get("seed", 0)),
        backbone=str(config.get("backbone")),
        split=split,
        metric=metric,
        score=scale * result[metric],
        mae=result.get("mae"),
        shuffled=shuffled,
        trained_params=int(summary["trained_params"]),
        step_s=step_seconds(run.read_metrics()),
        steps=int(summary["step"]),
        recipe=str(config.get("recipe", "paper")),
        path=Path(run_dir),
        task_options=json.dumps(_setting(config), sort_keys=True),
        majority=None if result.get("majority_share") is None else scale * result["majority_share"],
        lr=None if config.get("lr") is None else float(config["lr"]),
        device=str(config.get("device") or "cpu"),
    )


def _setting(config: dict) -> dict:
    """What one row of the table must not mix: the task's options (less where its data lies) and the
    exact share of the training split (two shares that print alike in the task's name are refused)."""
    options = {
        k: v
        for k, v in (config.get("task_options") or {}).items()
        if k not in TASK_OPTIONS_SAME and not (k in TASK_OPTIONS_NEUTRAL and v == TASK_OPTIONS_NEUTRAL[k])
    }
    fraction = training_share(config)
    return options if fraction is None else {**options, "train_fraction": fraction}


def find_run_dirs(root: Path) -> list[Path]:
    """Every run folder under `root` (a folder holding config.json and summary.json), sorted; not the runs
    a run keeps of its own (RunDir.DERIVED: a backtest's origins, the same seed at other cutoffs)."""
    runs = sorted(p.parent for p in Path(root).rglob(RunDir.CONFIG) if (p.parent / "summary.json").is_file())
    return [p for p in runs if RunDir.DERIVED not in p.relative_to(root).parts]


def refuse_two_runs_of_a_cell(runs: list, cell_of: Callable[[object], tuple[str, str, int]]) -> None:
    """Refuse, in one line naming both folders, two runs of one cell of a table (`cell_of(run)`: the task
    or subset its row names, the arm, the seed): the cell must not average both. The controls, the
    competitions' and the ucr tables read their runs through it."""
    seen: dict[tuple, Path] = {}
    for run in runs:
        where, arm, seed = cell_of(run)
        first = seen.setdefault((where, arm, seed), run.path)
        if first != run.path:
            raise FptError(
                f"{where}: two runs of {arm} seed {seed} ({first}, {run.path}); "
                "keep one under the folder, or the table would average both"
            )


def read_arm_runs(root: Path) -> list[ArmRun]:
    """Every finished controls run under `root`, in folder order; unfinished runs and runs of other kinds are
    left out (read_arm_run), and so are the probes a rate was chosen from (fpt.experiments.rate_search); two
    runs of one task, arm and seed are refused, and so are runs of one task made with other task options (a
    z-normalised series beside raw ones, another horizon) or on other shares of its training split: one row
    must not average two settings."""
    dirs = [p for p in find_run_dirs(root) if PROBES not in p.relative_to(root).parts]
    runs = [r for r in (read_arm_run(p) for p in dirs) if r is not None]
    refuse_two_runs_of_a_cell(runs, lambda run: (run.task, run.arm, run.seed))
    for task in dict.fromkeys(r.task for r in runs):
        settings = {r.task_options: r.path for r in runs if r.task == task}
        if len(settings) > 1:
            (a, first), (b, second) = list(settings.items())[:2]
            raise FptError(
                f"{task}: runs made with other task options or shares of the training split ({first}: {a}; "
                f"{second}: {b}); "
                "keep one setting of a task under the folder"
            )
    return runs


def mean_std(values: list[float], digits: int) -> str:
    """`mean ± std` (sample std) to `digits` places; the mean alone for one value, "—" for none."""
    if not values:
        return "—"
    # rounded to 9 places first, so that float error (98.51 - 98.06 = 0.44999...) does not decide a digit
    spread = f" ± {round(statistics.stdev(values), 9):.{digits}f}" if len(values) > 1 else ""
    return f"{round(statistics.mean(values), 9):.{digits}f}{spread}"


def _step_text(runs: list[ArmRun]) -> str:
    """An arm's median s/step and, where some or all of its runs trained off the CPU, on which device:
    a GPU's step time beside CPU runs' would read as the arm's own speed."""
    times = [r.step_s for r in runs if r.step_s is not None]
    text = f"{statistics.median(times):.3f}" if times else "—"
    elsewhere = [r.device for r in runs if r.device != "cpu"]
    if elsewhere:
        where = ", ".join(sorted(set(elsewhere)))
        share = "" if len(elsewhere) == len(runs) else f"{len(elsewhere)} of {len(runs)} "
        text += f" ({share}on {where})"
    return text


def _shuffled_text(shuffled: list[float], runs: int, digits: int) -> str:
    """An arm's shuffled scores, with how many where some of its runs were not scored on shuffled inputs."""
    if not shuffled:
        return "not scored"
    return mean_std(shuffled, digits) + _scored_share(len(shuffled), runs)


def _scored_share(scored: int, runs: int) -> str:
    """The suffix " (n=2 of 3)" where only some of an arm's runs were scored on shuffled inputs, else empty."""
    return f" (n={scored} of {runs})" if scored < runs else ""


def arm_means(runs: list[ArmRun]) -> list[float]:
    """Each arm's mean score over its seeds: what a table or chart prints side by side."""
    arms = sorted({r.arm for r in runs})
    return [statistics.mean(r.score for r in runs if r.arm == arm) for arm in arms]


def paired_gaps(runs: list[ArmRun], fpt: list[ArmRun], shuffled: bool = False) -> list[float]:
    """Arm minus fpt, seed by seed (seeds both have); `shuffled`: on shuffled inputs."""
    by_seed = {r.seed: (r.shuffled if shuffled else r.score) for r in fpt}
    return [
        (r.shuffled if shuffled else r.score) - by_seed[r.seed]
        for r in runs
        if by_seed.get(r.seed) is not None and (r.shuffled if shuffled else r.score) is not None
    ]


ONE_SEED = "one seed: no spread to judge by"
# an arm no run of which beat the majority label learned nothing at its recipe and budget: a gap to fpt
# then measures the recipe (a rate too high to train every weight, say), not what the blocks are worth
NOT_LEARNED = "not judged: it did not learn here (every run at or below the majority label)"


def did_not_learn(runs: list[ArmRun]) -> bool:
    """Whether every run scored at or below its split's majority label (accuracy only)."""
    return bool(runs) and all(r.majority is not None and r.score <= r.majority for r in runs)


def direction(gaps: list[float], metric: str) -> str:
    """ "better", "worse" or "no clear difference": worse where the mean gap is beyond one standard
    deviation of the paired gaps on the losing side. One seed has no spread to judge a gap by."""
    if not gaps:
        return "not measured"
    if len(gaps) == 1:
        return ONE_SEED
    sign = -1.0 if metric == "mse" else 1.0  # a positive gain is better
    mean = sign * statistics.mean(gaps)
    spread = statistics.stdev(gaps)
    if mean > spread:
        return "better"
    if mean < -spread:
        return "worse"
    return "no clear difference"


SAME_RECIPE = (
    "Every arm ran under the same recipe, budget and dropout (the recipe's, given to every run: a recipe's "
    "dropout otherwise reaches only a frozen body), on the same seeds"
)
NOT_TUNED = "; no arm was tuned apart from the others."
# where --lr-search gave some arm a rate of its own (fpt.experiments.rate_search)
OWN_RATE_TUNED = (
    ", except that an arm marked 'at its own rate' trained at the learning rate chosen for it on validation "
    "(below); no arm was tuned otherwise."
)
NOTES = (
    " Score: the test split scored once at the end of each run, mean ± std over seeds. Shuffled inputs: the "
    "same test split with each input's tokens permuted (seed 0; `fpt evaluate --shuffle tokens`). Trained "
    "params: from each run's summary.json. s/step: the median over evaluation intervals of seconds per step, "
    "from metrics.jsonl, the evaluation at the end of each interval included; on the CPU unless the "
    "cell names another device. The none and attention "
    "controls keep the backbone's layer norms outside its blocks (MiniLM's embedding layer norm), as fpt's "
    "own arm and block do (fpt.backbones.control_bodies)."
)


def controls_markdown(runs: list[ArmRun], title: str = CONTROLS_TITLE, note: str = "") -> str:
    """The controls table (one block per task, one row per arm) and Tan et al.'s direction of effect
    beside ours, from finished runs (read_arm_runs); `note`: where and how it ran (e.g. the machine)."""
    if not runs:
        raise FptError("no finished controls runs found; run `fpt reproduce controls` first")
    own_rate = own_rates(runs)
    head = SAME_RECIPE + (OWN_RATE_TUNED if own_rate else NOT_TUNED)
    lines = [f"### {title}", "", head + NOTES + (f" {note}" if note else ""), ""]
    verdicts = []
    for task in task_order(runs):
        of_task = [r for r in runs if r.task == task]
        metric = of_task[0].metric
        unit = "MSE (lower is better)" if metric == "mse" else "accuracy in %"
        digits = places(metric, arm_means(of_task))
        splits = sorted({r.split for r in of_task})
        settings = sorted({(r.backbone, r.recipe, r.steps) for r in of_task})
        setting = "; ".join(f"backbone {b}, recipe {rc}, {s:,} steps" for b, rc, s in settings)
        lines += [
            f"#### {task_heading(task)}: {unit} on the {', '.join(splits)} split ({setting})",
            "",
            "| arm | what it is | score | shuffled inputs | trained params | s/step (median) | gap to fpt |",
            "|---|---|---|---|---|---|---|",
        ]
        fpt = [r for r in of_task if r.arm == "fpt"]
        for arm in CONTROL_ARMS:
            mine = sorted((r for r in of_task if r.arm == arm), key=lambda r: r.seed)
            if not mine:
                lines.append(f"| {arm} | {ARM_TEXTS[arm]} | not run: no finished run in these files | | | | |")
                continue
            scores = [r.score for r in mine]
            if metric == "mse" and all(r.mae is not None for r in mine):
                score = f"{mean_std(scores, digits)} / MAE {statistics.mean(r.mae for r in mine):.3f}"
            else:
                score = mean_std(scores, digits)
            if did_not_learn(mine):
                score += f", at or below the majority label's {statistics.mean(r.majority for r in mine):.1f}"
            shuffled = [r.shuffled for r in mine if r.shuffled is not None]
            params = sorted({r.trained_params for r in mine})
            step = _step_text(mine)
            gaps = paired_gaps(mine, fpt) if arm != "fpt" and fpt else []
            gap = "—" if arm == "fpt" else (mean_std(gaps, digits) if gaps else "no fpt run to pair")
            what = ARM_TEXTS[arm]
            if (task, arm) in own_rate:
                what += f", at its own rate ({' / '.join(f'{lr:g}' for lr in sorted({r.lr for r in mine}))})"
            lines.append(
                f"| {arm} | {what} | {score} (n={len(mine)}) | "
                f"{_shuffled_text(shuffled, len(mine), digits)} | "
                f"{' / '.join(f'{p:,}' for p in params)} | {step} | {gap} |"
            )
            if arm in TAN_ET_AL and gaps:
                verdicts.append((task, arm, metric, gaps, digits, did_not_learn(mine)))
        lines.append("")
    lines += _direction_section(runs, verdicts)
    return "\n".join(lines) + "\n"


def _direction_section(runs: list[ArmRun], verdicts: list[tuple]) -> list[str]:
    lines = [
        "#### Tan et al.'s direction of effect beside ours",
        "",
        TAN_SUMMARY,
        "",
        "Ours, per task and arm: the gap to fpt (arm minus fpt, paired by seed; accuracy points, or MSE where "
        "lower is better) counts as worse or better only where its mean is beyond one standard deviation "
        "of the paired gaps; otherwise no clear difference. A gap from one seed is not judged, nor one of "
        "an arm that did not learn at all (no run above the majority label).",
        "",
        "| task | arm | Tan et al. (forecasting) | ours: gap to fpt | ours | agrees? |",
        "|---|---|---|---|---|---|",
    ]
    for task, arm, metric, gaps, digits, not_learned in verdicts:
        found = direction(gaps, metric)
        agrees = {"worse": "no: worse than fpt", ONE_SEED: "not judged"}.get(found, "yes")
        if not_learned:
            agrees = NOT_LEARNED
        lines.append(
            f"| {task_heading(task)} | {arm} | {TAN_ET_AL[arm]} | {mean_std(gaps, digits)} (n={len(gaps)}) | "
            f"{found} | {agrees} |"
        )
    lines += ["", *_shuffle_lines(runs)]
    return lines


def _shuffle_lines(runs: list[ArmRun]) -> list[str]:
    """Per task: how much shuffling the inputs cost fpt, beside what it cost the controls."""
    lines = []
    for task in dict.fromkeys(r.task for r in runs):
        drops = {}  # arm -> its mean drop, with how many of its runs it is over where not all of them
        for arm in CONTROL_ARMS:
            arm_runs = [r for r in runs if r.task == task and r.arm == arm]
            mine = [r.shuffled - r.score for r in arm_runs if r.shuffled is not None]
            if mine:
                drops[arm] = f"{statistics.mean(mine):+.3g}{_scored_share(len(mine), len(arm_runs))}"
        if "fpt" in drops:
            metric = next(r.metric for r in runs if r.task == task)
            unit = "MSE" if metric == "mse" else "points"
            others = ", ".join(f"{arm} {drop}" for arm, drop in drops.items() if arm != "fpt")
            lines.append(
                f"Shuffled inputs on {task_heading(task)} (shuffled minus ordered, {unit}, mean over seeds): "
                f"fpt {drops['fpt']}; {others or 'no control scored'}."
            )
    return lines


def write_controls_table(
    folder: Path, out: Path | None = None, title: str = CONTROLS_TITLE, note: str = "", chart: Path | None = None
) -> str:
    """`fpt controls FOLDER`: the table of the `fpt reproduce controls` runs under FOLDER (searched
    deeply), with how each --lr-search rate was chosen (the probes' chosen.json); written to `out`
    (else returned to print) and drawn to `chart` (PNG) where given, each checked writable first."""
    for path in (out, chart):
        if path is not None:
            _check_writable(path)
    runs = read_arm_runs(folder)
    text = controls_markdown(runs, title, note) + probe_section(read_choices(folder))
    _write_outputs(runs, text, out, chart, title)
    return text


def _check_writable(path: Path) -> None:
    """Refuse, before anything is read or drawn, a file that could not be written where it is named
    (missing folders are made, as fpt.core.paths.atomic_write makes them)."""
    if path.is_dir():
        raise FptError(f"{path} is a folder: name a file to write")
    ancestor = nearest_existing(path.parent)
    if not ancestor.is_dir():
        raise FptError(f"cannot write {path}: {ancestor} is a file, not a folder; name a file in a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise FptError(f"cannot write {path}: {ancestor} is not writable; name a file elsewhere")


def _write_outputs(runs: list[ArmRun], text: str, out: Path | None, chart: Path | None, title: str) -> None:
    """The picture (`chart`) and the Markdown (`out`), each written whole or not at all; a refusal the
    checks could not foresee (a full disk, say) is an FptError naming the file, and may leave the
    picture new beside an old table (readme_tables.py --check names such a pair)."""
    from fpt.core.paths import write_text

    outputs = [(out, lambda: write_text(out, text))] if out else []
    if chart:
        from fpt.experiments.plots import controls_chart  # matplotlib: only when a picture is asked for

        outputs.insert(0, (chart, lambda: controls_chart(runs, chart, title)))
    for path, write in outputs:
        try:
            write()
        except OSError as exc:
            raise FptError(f"cannot write {path}: {exc.strerror or exc}") from None
