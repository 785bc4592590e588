"""Every figure fpt draws: the attention map of a trained run (the paper's Bit XOR figure), a
confusion matrix, the learning curves of a sweep, and each table as grouped bars beside the
paper's figures."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from fpt.core.errors import FptError  # noqa: E402
from fpt.core.paths import atomic_write  # noqa: E402
from fpt.core.scores import is_regression, places  # noqa: E402
from fpt.experiments.paper import CONTROLS_TITLE, PAPER_STEPS, TASK_COLUMNS, task_heading  # noqa: E402
from fpt.experiments.tables import column_heading, failure_text, steps_data, table_data  # noqa: E402
from fpt.models.transformer import FrozenPretrainedTransformer  # noqa: E402
from fpt.tasks import Task  # noqa: E402
from fpt.training.build import ATTENTION_BYTES_BUDGET  # noqa: E402
from fpt.training.run_dir import RunDir, is_subset  # noqa: E402


@torch.inference_mode()
def mean_attention(
    model: FrozenPretrainedTransformer,
    task: Task,
    layer: int,
    examples: int = 64,
    bytes_budget: float = ATTENTION_BYTES_BUDGET,
) -> torch.Tensor:
    """Attention of one layer averaged over heads and over the first `examples` held-out inputs
    (in evaluation order).

    The eager path returns every layer's (batch, heads, L, L) weights at once (ListOps' 2,000
    tokens: about 1 GB an example on MiniLM, and as much again for the scores they come from), so
    inputs go through in batches that fit `bytes_budget`; a batch padded shorter than the longest
    is added where its positions are, and positions past an input's end count as 0, so the result
    does not depend on the batching."""
    config = model.backbone.config
    n_layers = config.num_hidden_layers
    if not 0 <= layer < n_layers:
        raise FptError(f"--layer must be between 0 and {n_layers - 1}, got {layer}")
    # fp32 probabilities and the scores they come from, every layer, every head
    per_example = 2 * 4 * n_layers * getattr(config, "num_attention_heads", 1) * task.spec.seq_len**2
    batch_size = max(1, min(examples, int(bytes_budget // per_example)))
    device = next(model.parameters()).device
    total, seen = torch.zeros(0, 0), 0
    # Fused attention kernels do not return weights; the eager path does, with the same result.
    previous = config._attn_implementation
    model.backbone.set_attn_implementation("eager")
    try:
        model.eval()
        for batch in task.eval_batches(batch_size):
            x, mask = batch.x[: examples - seen], None if batch.mask is None else batch.mask[: examples - seen]
            if mask is not None:  # the batch's longest input may be among the rows cut
                width = int(mask.sum(1).max())
                x, mask = x[:, :width], mask[:, :width]
            _, attentions = model(x.to(device), None if mask is None else mask.to(device), output_attentions=True)
            weights = attentions[layer].float().mean(dim=1)  # (batch, query, key)
            if mask is not None:  # a padding token's query row says nothing of the input: it counts as 0
                weights = weights * mask.to(weights.device, weights.dtype)[:, :, None]
            summed = weights.sum(dim=0).cpu()
            length = max(total.shape[0], summed.shape[0])
            total = F.pad(total, (0, length - total.shape[0], 0, length - total.shape[0]))
            total[: summed.shape[0], : summed.shape[1]] += summed
            seen += x.shape[0]
            if seen >= examples:
                break
    finally:
        model.backbone.set_attn_implementation(previous)
    if seen == 0:
        raise FptError(f"task {task.name!r} has no held-out inputs to average attention over")
    return total / seen


def plot_attention(attention: torch.Tensor, path: Path, title: str, last_k: int) -> Path:
    """Heatmap of (query, key) attention; the output tokens (the last k queries) are marked."""
    length = attention.shape[0]
    fig, ax = plt.subplots(figsize=(5.5, 4.8), dpi=120)
    image = ax.imshow(attention.numpy(), cmap="viridis", vmin=0)
    ax.set_xlabel("key position (attended to)")
    ax.set_ylabel("query position")
    ax.set_title(title, fontsize=10)
    if last_k < length:
        ax.axhline(length - last_k - 0.5, color="white", linewidth=0.8, linestyle="--")
        ax.text(
            length - 0.6,
            length - last_k - 0.7,
            "output tokens below",
            color="white",
            ha="right",
            va="bottom",
            fontsize=7,
        )
    if length <= 32:
        ax.set_xticks(range(length))
        ax.set_yticks(range(length))
        ax.tick_params(labelsize=7)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="mean attention weight")
    fig.tight_layout()
    return _save(fig, path)


def _save(fig, path: Path, metadata: dict[str, str] | None = None) -> Path:
    """Write the figure as PNG (with these text fields), atomically, and close it."""
    try:
        return atomic_write(
            path, lambda tmp: fig.savefig(tmp, format="png", bbox_inches="tight", metadata=metadata)
        )  # tight: keeps legends placed outside
    finally:
        plt.close(fig)


def png_description(path: Path) -> str | None:
    """The Description text field of a PNG (where controls_chart keeps what it drew), None without one."""
    from PIL import Image  # matplotlib's own dependency

    with Image.open(path) as image:
        return image.text.get("Description")


def plot_confusion(matrix: list[list[int]], path: Path, title: str) -> Path:
    """Row-normalised confusion matrix (rows: true class, columns: predicted)."""
    counts = torch.tensor(matrix, dtype=torch.float64)
    rates = counts / counts.sum(1, keepdim=True).clamp_min(1)
    n = len(matrix)
    fig, ax = plt.subplots(figsize=(5.5, 4.8), dpi=120)
    image = ax.imshow(rates.numpy(), cmap="Blues", vmin=0, vmax=1)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    ax.set_title(title, fontsize=10)
    if n <= 20:
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
        for (i, j), value in np.ndenumerate(rates.numpy()):
            if value >= 0.005:
                ax.text(
                    j,
                    i,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white" if value > 0.5 else "black",
                )
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="share of the true class")
    fig.tight_layout()
    return _save(fig, path)


def curve_points(records: list[dict]) -> list[dict]:
    """A run's evaluations in step order, one per step: the whole split where that step has it
    (the end of a run, a confirmed target), else its fixed subset (--eval-subset, in between)."""
    by_step: dict[int, dict] = {}
    for record in records:
        if record["step"] not in by_step or not is_subset(record):
            by_step[record["step"]] = record
    return [by_step[step] for step in sorted(by_step)]


def learning_curves(rows: list[dict], path: Path, row_key: str = "variant") -> Path | None:
    """One panel per task: held-out accuracy (a regression task's MSE) against step, one line per
    variant and seed. Scores of a fixed subset (in between) are hollow markers on the same line as
    the whole split's."""
    done = [
        (r, curve_points(RunDir(r["run_dir"]).read_metrics()))
        for r in rows
        if r["status"] == "done" and r.get("run_dir")
    ]
    done = [(r, points) for r, points in done if points]
    tasks = list(dict.fromkeys(str(r["task"]) for r, _ in done))
    if not tasks:
        return None
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.4), dpi=110, squeeze=False)
    colours = {}
    for ax, task in zip(axes[0], tasks):
        splits, subsets, regression = set(), set(), False
        for r, points in ((r, points) for r, points in done if r["task"] == task):
            variant = str(r.get(row_key, "fpt"))
            colour = colours.setdefault(variant, f"C{len(colours) % 10}")
            dashed = list(colours).index(variant) // 10 % 2  # the 11th variant on reuses colours, dashed
            regression = is_regression(points[0])  # a forecast's panel: MSE, lower is better
            _draw_run(ax, points, colour, "--" if dashed else "-", regression, variant)
            splits |= {str(p["split"]).split("[")[0] for p in points}
            subsets |= {p["examples"] for p in points if is_subset(p) and p.get("examples")}
        ax.set_title(TASK_COLUMNS.get(task, task))
        ax.set_xlabel(
            "step"
            + (f" (hollow: subsets of {', '.join(f'{n:,}' for n in sorted(subsets))} examples)" if subsets else ""),
            fontsize=8 if subsets else None,
        )
        ax.set_ylabel(f"{'/'.join(sorted(splits))} " + ("MSE" if regression else "accuracy (%)") + ", during training")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    for ax in axes[0]:  # below each panel (after the layout, which would shrink the panel to fit it):
        # inside it, a long list of runs covers the curves it names
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.2), frameon=False)
    return _save(fig, path)


def _draw_run(ax, points: list[dict], colour: str, linestyle: str, regression: bool, variant: str) -> None:
    """One run's curve on a panel: a line, solid markers on the whole split's scores and hollow ones
    on a fixed subset's (a run evaluated once is a point, which a bare line would not draw at all)."""
    steps = [p["step"] for p in points]
    scores = [p["mse"] if regression else 100 * p["accuracy"] for p in points]
    labelled = variant not in ax.get_legend_handles_labels()[1]
    ax.plot(steps, scores, color=colour, alpha=0.8, linestyle=linestyle, label=variant if labelled else None)
    whole = [not is_subset(p) for p in points]
    for hollow, style in ((False, dict(color=colour)), (True, dict(facecolors="white", edgecolors=colour))):
        chosen = [(s, a) for s, a, w in zip(steps, scores, whole) if w != hollow]
        ax.scatter([s for s, _ in chosen], [a for _, a in chosen], s=10, zorder=3, **style)


def _grouped_bars(
    groups: list[str],
    series: list[str],
    ours: dict,
    spread: dict,
    paper: dict,
    path: Path,
    title: str,
    ylabel: str,
    log: bool = False,
    empty: dict | None = None,
) -> Path:
    """Per group (a table column) one bar per series (a table row): ours solid, with its spread
    (below, above) as an error bar, and the paper's figure hatched beside it where it has one.
    `empty`: why a (series, group) slot the paper fills has no bar of ours ("not run" if absent)."""
    empty = empty or {}
    width = 0.8 / max(1, 2 * len(series))
    inches = min(16.0, max(6.0, 0.5 * len(groups) * (len(series) + 1)))
    fig, ax = plt.subplots(figsize=(inches + 2.0, 4.2), dpi=110)  # 2 inches for the legend on the right
    x = np.arange(len(groups))
    for i, name in enumerate(series):
        colour = f"C{i % 10}"
        at = x - 0.4 + width * (2 * i + 0.5)
        mine = [ours.get((name, g), np.nan) for g in groups]
        # no error bar (and no cap) where there is no spread: a single seed
        errors = np.array([spread.get((name, g), (np.nan, np.nan)) for g in groups]).T
        ran = not all(np.isnan(mine))
        ax.bar(at, mine, width, yerr=errors, capsize=2, color=colour, label=f"{name} (ours)" if ran else None)
        theirs = [paper.get((name, g), np.nan) for g in groups]
        if any(not np.isnan(v) for v in theirs):
            ax.bar(
                at + width,
                theirs,
                width,
                color=colour,
                alpha=0.35,
                hatch="//",
                edgecolor=colour,
                label=f"{name} (paper)",
            )
        _say_why_empty(ax, at, mine, theirs, [empty.get((name, g), "not run") for g in groups])
    ax.set_xticks(x)
    ax.set_xticklabels(
        groups, fontsize=8, rotation=20 if len(groups) > 4 else 0, ha="right" if len(groups) > 4 else "center"
    )
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.set_title(textwrap.fill(title, width=int(14 * inches)), fontsize=9)  # ~14 characters an inch at 9 pt
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # never over a bar
    fig.tight_layout()
    return _save(fig, path)


def _say_why_empty(ax, at, mine: list[float], theirs: list[float], reasons: list[str]) -> None:
    """Where the paper has a bar and we have none, the reason, written up from the slot's foot."""
    for spot, value, their, reason in zip(at, mine, theirs, reasons):
        if np.isnan(value) and not np.isnan(their):
            # x in data, y in axes coordinates: the foot of the axes, on a log scale too
            ax.annotate(
                reason,
                (spot, 0),
                xycoords=("data", "axes fraction"),
                xytext=(0, 3),
                textcoords="offset points",
                rotation=90,
                fontsize=6,
                ha="center",
                va="bottom",
                color="0.4",
            )


def table_chart(
    rows: list[dict], path: Path, title: str, paper_table: str | None = None, row_key: str = "variant"
) -> Path | None:
    """A table of accuracies (a forecast's: MSEs) as grouped bars: per column (task and split) our
    mean over seeds, the standard deviation as error bar, beside the paper's figure. None where no
    run finished."""
    import statistics

    data = table_data(rows, paper_table, row_key)
    if not data.ours:
        return None
    groups = {column: column_heading(*column) for column in data.columns}
    ours = {(label, groups[c]): statistics.mean(v) for (label, c), v in data.ours.items()}
    spread = {(label, groups[c]): (statistics.stdev(v),) * 2 for (label, c), v in data.ours.items() if len(v) > 1}
    paper = {(label, groups[c]): v for (label, c), v in data.paper.items()}
    empty = {
        (label, groups[c]): failure_text(kinds, data.layers.get(label))
        for (label, task), kinds in data.failures.items()
        for c in data.columns
        if c[0] == task
    }
    regression = {data.metric(c) == "mse" for c in data.columns}  # a forecast's columns: MSE, lower is better
    ylabel = {frozenset({False}): "accuracy (%)", frozenset({True}): "MSE (lower is better)"}.get(
        frozenset(regression), "accuracy (%), or MSE for a forecast (lower is better)"
    )
    return _grouped_bars(list(groups.values()), data.rows, ours, spread, paper, path, title, ylabel, empty=empty)


def steps_chart(rows: list[dict], path: Path, title: str, row_key: str = "variant") -> Path | None:
    """Table 6 as grouped bars on a log scale: per task the median step at which each variant's
    converged runs converged, the range of those steps as error bar, beside the paper's
    steps. None where no run converged."""
    tasks, labels, cells = steps_data(rows, row_key)
    medians = {
        (label, TASK_COLUMNS.get(t, t)): (float(np.median(c.steps)), c.steps)
        for (label, t), c in cells.items()
        if c.steps
    }
    if not medians:
        return None
    ours = {key: median for key, (median, _) in medians.items()}
    spread = {key: (median - min(steps), max(steps) - median) for key, (median, steps) in medians.items()}
    paper = {
        (label, TASK_COLUMNS.get(t, t)): PAPER_STEPS[label][t]
        for label in labels
        for t in tasks
        if t in PAPER_STEPS.get(label, {})
    }
    empty = {(label, TASK_COLUMNS.get(t, t)): "not converged" if c.runs else c.text for (label, t), c in cells.items()}
    return _grouped_bars(
        [TASK_COLUMNS.get(t, t) for t in tasks],
        labels,
        ours,
        spread,
        paper,
        path,
        title,
        "gradient steps to convergence",
        log=True,
        empty=empty,
    )


def plot_forecasts(samples: dict, path: Path, title: str) -> Path:
    """One panel per sampled window (fpt.training.evaluation.forecast_samples): the end of its look-back,
    its true future and the forecast, on the scaled values the metrics read, each with its MSE."""
    count, horizon = samples["truth"].shape
    shown = min(samples["lookback"].shape[1], 2 * horizon)  # enough past to see the level and the rhythm
    fig, axes = plt.subplots(count, 1, figsize=(7.5, 1.8 * count + 0.6), dpi=120, sharex=True, squeeze=False)
    for ax, start, past, truth, forecast in zip(
        axes[:, 0], samples["starts"], samples["lookback"], samples["truth"], samples["forecast"]
    ):
        ax.plot(range(-shown, 0), past[-shown:].numpy(), color="0.55", linewidth=0.9, label="look-back")
        ax.plot(range(horizon), truth.numpy(), color="black", linewidth=0.9, label="true future")
        ax.plot(range(horizon), forecast.numpy(), color="tab:orange", linewidth=1.2, label="forecast")
        ax.axvline(-0.5, color="0.8", linewidth=0.8)
        mse = (forecast - truth).square().mean().item()
        ax.set_title(f"window {start}: MSE {mse:.3f}", fontsize=8, loc="left")
        ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=7, loc="best", ncol=3, frameon=False)
    axes[-1, 0].set_xlabel("steps from the forecast's start (look-back < 0 <= horizon)", fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


# what controls_chart shows besides the values (bars, marks, the figures beside them): changed with the
# drawing code, it gives pictures drawn by older code another digest, so --check names them stale
CONTROLS_CHART_LOOK = 3


def controls_chart(runs: list, path: Path, title: str = CONTROLS_TITLE) -> Path | None:
    """The controls table (fpt.experiments.controls) as a picture: a panel per task, a bar per arm at
    its mean score on the split the table reports (test, where the runs scored it), the standard
    deviation over seeds as error bar and each seed a dot, its mean on shuffled inputs as a hollow
    diamond, fpt's mean as a dashed line, the majority label's share as a dotted one and the mean ± std
    in figures right of the panel. `runs`: finished runs (controls.read_arm_runs). None where there
    are none."""
    figure = controls_figure(runs, title)
    return _save(figure, path, {"Description": controls_digest(runs, title)}) if figure else None


def controls_figure(runs: list, title: str = CONTROLS_TITLE):
    """controls_chart's figure, not yet saved (its axes hold what a test can check: a bar per arm);
    None where there are no runs."""
    import math

    from fpt.experiments.paper import CONTROL_ARMS
    from fpt.experiments.rate_search import own_rates, task_order

    if not runs:
        return None
    tasks = task_order(runs)
    columns = min(3, len(tasks))
    rows = math.ceil(len(tasks) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, 2.7 * rows), dpi=110, squeeze=False)
    own = own_rates(runs)
    for ax, task in zip(axes.flat, tasks):
        _controls_panel(ax, [r for r in runs if r.task == task], CONTROL_ARMS, own)
    for ax in list(axes.flat)[len(tasks) :]:
        ax.set_visible(False)
    handles = [
        plt.Rectangle((0, 0), 1, 1, color="C0", label="fpt: mean ± std over seeds"),
        plt.Rectangle((0, 0), 1, 1, color="0.65", label="a control: mean ± std"),
        plt.Line2D([], [], color="k", marker=".", linestyle="", label="a seed"),
        plt.Line2D([], [], color="C3", marker="D", fillstyle="none", linestyle="", label="shuffled inputs (mean)"),
        plt.Line2D([], [], color="C0", linestyle="--", label="fpt's mean"),
        plt.Line2D([], [], color="0.3", linestyle=":", label="majority label"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=6, fontsize=7, bbox_to_anchor=(0.5, -0.02))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def controls_digest(runs: list, title: str = CONTROLS_TITLE) -> str:
    """A hash of every value controls_chart draws from `runs`, kept in the PNG: a picture drawn from
    other runs than a table's has another (benchmarks/readme_tables.py --check compares them)."""
    import hashlib
    import json

    from fpt.experiments.rate_search import own_rates

    own = own_rates(runs)
    drawn = sorted(
        [r.task, r.arm, r.seed, r.score, r.shuffled, r.majority, r.steps, r.split, (r.task, r.arm) in own] for r in runs
    )
    return "fpt controls " + hashlib.sha256(json.dumps([CONTROLS_CHART_LOOK, title, drawn]).encode()).hexdigest()[:16]


def _controls_panel(ax, runs: list, arms: list[str], own: set[tuple[str, str]]) -> None:
    """One task of controls_chart: arms top to bottom in the table's order."""
    import statistics

    task, metric = runs[0].task, runs[0].metric
    fpt = [r.score for r in runs if r.arm == "fpt"]
    # the table's places for this task: two where a near-perfect mean would print as 100.0 at one
    digits = places(metric, [statistics.mean(r.score for r in runs if r.arm == arm) for arm in {r.arm for r in runs}])
    for y, arm in enumerate(arms):
        mine = [r for r in runs if r.arm == arm]
        if not mine:
            ax.text(0.01, y, "not run", transform=ax.get_yaxis_transform(), va="center", fontsize=7, color="0.4")
            continue
        scores = [r.score for r in mine]
        spread = statistics.stdev(scores) if len(scores) > 1 else None
        ax.barh(y, statistics.mean(scores), xerr=spread, capsize=2, height=0.6, color="C0" if arm == "fpt" else "0.65")
        ax.plot(scores, [y] * len(scores), ".", color="k", markersize=3)
        # the mean in figures beside the panel: bars near 100 (or 0.4 MSE) hide gaps of a point or less
        figures = f"{statistics.mean(scores):.{digits}f}" + (f" ± {spread:.{digits}f}" if spread is not None else "")
        ax.text(1.02, y, figures, transform=ax.get_yaxis_transform(), va="center", fontsize=7)
        shuffled = [r.shuffled for r in mine if r.shuffled is not None]
        if shuffled:
            ax.plot(statistics.mean(shuffled), y, "D", color="C3", fillstyle="none", markersize=5)
    if fpt:
        ax.axvline(statistics.mean(fpt), color="C0", linestyle="--", linewidth=1)
    majority = [r.majority for r in runs if r.majority is not None]
    if majority and metric != "mse":
        ax.axvline(statistics.mean(majority), color="0.3", linestyle=":", linewidth=1)
    labels = [f"{arm} (own rate)" if (task, arm) in own else arm for arm in arms]
    ax.set_yticks(range(len(arms)), labels, fontsize=8)
    ax.set_ylim(len(arms) - 0.5, -0.5)  # fpt on top, as in the table
    splits = ", ".join(sorted({r.split for r in runs}))  # as the table's heading gives them
    steps = " / ".join(f"{s:,}" for s in sorted({r.steps for r in runs}))
    if metric == "mse":
        ax.set_xlim(left=0)
        ax.set_xlabel(f"MSE on {splits} (lower is better)", fontsize=8)
    else:
        ax.set_xlim(0, 100)
        ax.set_xlabel(f"accuracy % on {splits}", fontsize=8)
    ax.set_title(f"{task_heading(task)}, {steps} steps", fontsize=9)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", alpha=0.3)
