"""`fpt predict RUN --input TABLE` of a run over a long-format table (`--task panel:FILE`): the
`horizon` steps after every series' last observation, in the series' own units and on its own
calendar (each date continued at the table's frequency, a month at a time for a monthly table, not
in steps of 31 days), written as a long-format table of its own (unique_id, ds, fpt) with a picture
of the history's tail and the forecast of the first few series.

The table is read as the run's was (fpt.data.panel.read_panel, the run's column names and
frequency); each look-back is scaled on itself, as in training (fpt.tasks.collections)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fpt.core.errors import FptError
from fpt.core.paths import atomic_write
from fpt.tasks.base import Batch
from fpt.training.inference import predict_values
from fpt.training.intervals import interval_line

PLOTTED = 4  # series drawn in the picture beside the table


def future_forecasts(model, task, source: Path) -> tuple[object, list[np.ndarray], list[np.ndarray], np.ndarray]:
    """(the table read as a SeriesCollection, each series' forecast (horizon,), each series' forecast
    dates or steps, each series' look-back scale (what an interval's half-width is in units of))."""
    from fpt.data.panel import read_panel
    from fpt.tasks.collections import padded_lookback, window_scale

    notes = task.notes
    columns = notes.get("panel_columns")
    if columns is None:
        raise FptError(
            f"{task.name} is a competition: its future is its test split, scored by `fpt evaluate RUN --splits test`"
        )
    horizon, lookback = notes["horizon"], notes["lookback"]
    table = read_panel(source, horizon, freq=notes.get("freq"), min_length=horizon + 1, **columns)
    x = torch.stack([padded_lookback(torch.from_numpy(history), lookback) for history in table.history])
    mean, scale = window_scale(x)
    batches = [((x[i : i + 256] - mean[i : i + 256]) / scale[i : i + 256]).float() for i in range(0, len(x), 256)]
    scaled = predict_values(model, [Batch(b, torch.zeros(0)) for b in batches]).double()
    forecasts = list((scaled * scale + mean).numpy())
    return table, forecasts, [_future_stamps(table, i, horizon) for i in range(len(table))], scale[:, 0].numpy()


def _future_stamps(table, i: int, horizon: int) -> np.ndarray:
    """The `horizon` stamps after series i's last: dates at the table's frequency (pandas' calendar
    arithmetic: month ends stay month ends), or the integer steps after the last."""
    if table.dates is None:
        return np.arange(len(table.history[i]), len(table.history[i]) + horizon)
    import pandas as pd

    last = pd.Timestamp(table.dates[i][-1])
    return pd.date_range(last, periods=horizon + 1, freq=table.freq)[1:].to_numpy()


def interval_bounds(forecasts, scales, halfwidths: dict) -> dict[str, list[np.ndarray]]:
    """{"fpt-lo-80": [...], "fpt-hi-80": [...], ...} (Nixtla's names): each forecast -+ the level's
    half-width per step ahead, in the series' look-back scale."""
    bounds = {}
    for level, widths in halfwidths.items():
        reach = [np.asarray(widths) * s for s in scales]
        bounds[f"fpt-lo-{level}"] = [f - r for f, r in zip(forecasts, reach)]
        bounds[f"fpt-hi-{level}"] = [f + r for f, r in zip(forecasts, reach)]
    return bounds


def write_future(out: Path, table, forecasts: list[np.ndarray], stamps: list[np.ndarray], bounds: dict) -> Path:
    """A long-format CSV: unique_id, ds, fpt (the forecast) and its interval bounds, a row per series and step."""
    lines = [",".join(["unique_id", "ds", "fpt", *bounds])]
    for i, (series, values, when) in enumerate(zip(table.ids, forecasts, stamps)):
        texts = (
            [str(w) for w in when] if table.dates is None else list(np.datetime_as_string(when.astype("datetime64[s]")))
        )
        for step, (t, v) in enumerate(zip(texts, values)):
            cells = [f"{v:.7g}", *(f"{b[i][step]:.7g}" for b in bounds.values())]
            lines.append(f"{series},{t.replace('T00:00:00', '').replace('T', ' ')},{','.join(cells)}")
    return atomic_write(out, lambda tmp: tmp.write_text("\n".join(lines) + "\n"))


def _bands(bounds: dict) -> list[tuple[str, float]]:
    """(level, opacity) of each interval, the widest first so that the narrower lie on top of it, darker:
    0.15 for the widest to 0.3 for the narrowest (80% and 95% drawn as before levels could be chosen)."""
    levels = sorted((name.removeprefix("fpt-lo-") for name in bounds if name.startswith("fpt-lo-")), key=float)
    levels.reverse()
    if len(levels) < 2:
        return [(level, 0.3) for level in levels]
    return [(level, 0.15 + 0.15 * k / (len(levels) - 1)) for k, level in enumerate(levels)]


def draw_future(path: Path, table, forecasts: list[np.ndarray], stamps: list[np.ndarray], bounds: dict) -> Path:
    """The last few seasons of the first PLOTTED series and their forecasts, in their units and dates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = min(PLOTTED, len(table))
    figure, axes = plt.subplots(shown, 1, figsize=(8, 2.2 * shown), squeeze=False)
    for axis, i in zip(axes[:, 0], range(shown)):
        tail = max(len(forecasts[i]) * 4, 24)
        history = table.history[i][-tail:]
        when = np.arange(len(table.history[i]))[-tail:] if table.dates is None else table.dates[i][-tail:]
        axis.plot(when, history, color="0.3", linewidth=1, label="history")
        # the forecast drawn on from the last observation, so the eye follows one line
        axis.plot(
            [when[-1], *stamps[i]], [history[-1], *forecasts[i]], color="tab:blue", linewidth=1.5, label="fpt forecast"
        )
        for level, alpha in _bands(bounds):
            lower, upper = bounds[f"fpt-lo-{level}"][i], bounds[f"fpt-hi-{level}"][i]
            axis.fill_between(stamps[i], lower, upper, color="tab:blue", alpha=alpha, linewidth=0, label=f"{level}%")
        axis.set_title(str(table.ids[i]), fontsize=9, loc="left")
        axis.tick_params(labelsize=8)
    axes[0, 0].legend(fontsize=8, loc="upper left")
    figure.tight_layout()
    atomic_write(path, lambda tmp: figure.savefig(tmp, dpi=110, format="png"))
    plt.close(figure)
    return path


def predict_future(model, task, source: Path, out: Path, intervals: dict | None = None) -> list[str]:
    """`fpt predict` of a run over a table of series: the lines it prints. `intervals`: what the run
    recorded (fpt.training.intervals), or `conformal_intervals(model, task, levels=(50, 90, 99))` for
    other levels, whose half-widths become each forecast's bounds."""
    table, forecasts, stamps, scales = future_forecasts(model, task, source)
    bounds = interval_bounds(forecasts, scales, intervals["halfwidths"]) if intervals else {}
    written = write_future(out, table, forecasts, stamps, bounds)
    picture = draw_future(Path(f"{out}.png"), table, forecasts, stamps, bounds)  # beside it, a name no input has
    first, last = stamps[0][0], stamps[0][-1]
    if table.dates is not None:
        first, last = (str(np.datetime_as_string(d.astype("datetime64[D]"))) for d in (first, last))
    lines = [
        f"forecasts of {task.notes['horizon']} steps for {len(table)} series ({table.ids[0]}: {first} to {last}): "
        f"{written}",
        f"picture of the first {min(PLOTTED, len(table))}: {picture}",
    ]
    if bounds:
        lines.insert(1, interval_line(intervals, "fpt"))
    skipped = table.notes.get("skipped")
    if skipped:
        lines.append(f"{skipped['count']} series too short to forecast left out (first: {', '.join(skipped['ids'])})")
    return lines
