"""Predictions of a trained run on new inputs, in the task's own formats, in input order.

Inputs (`read_inputs`): an .npz file with `x` (rows as the task stores them: images as uint8
(N, H, W[, C]), token ids (N, L), or, for the generated bit tasks, model inputs (N, L, D)),
optional `mask` and `y`; MNIST-style IDX images (`*-images-idx3-ubyte[.gz]`, with labels read
from the matching `-labels-idx1-ubyte` file beside it when there is one); a ListOps TSV (LRA's
format); a TAPE JSON file of proteins. Labels are optional; where they are given, accuracy is
reported too. Anything that does not fit the run's task is refused in one line.

A forecast run (a regression task, fpt.tasks.forecasting) reads an .npz of windows, x (N, lookback)
with optional targets y (N, horizon) (then MSE and MAE are reported, in y's units), or a CSV in the
run's own format (`forecast_csv`): its date column and the run's columns, forecast `horizon` steps
past the file's last row.

The model comes from a run directory (`fpt.training.lifecycle.load_run`) or from a directory written by
`fpt export --format hf` (`load_saved_model`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from fpt.core.errors import FptError
from fpt.core.paths import atomic_write
from fpt.tasks import Task
from fpt.tasks.base import Batch
from fpt.training.inference import check_rows, predict_values, to_batches, unwrapped

OUTPUT_FORMATS = (".csv", ".jsonl", ".npy")


def is_saved_model(directory: str | Path) -> bool:
    """A directory `fpt export --format hf` wrote (a run directory holds a checkpoint instead)."""
    from fpt.models.transformer import WEIGHTS_NAME

    return (Path(directory) / WEIGHTS_NAME).is_file()


def load_saved_model(directory: str | Path, device: str | None = None):
    """(task, model) of an exported directory: the model on `device` (default auto) and its task,
    rebuilt from the name and options recorded with it (a dataset task reads its files again)."""
    from fpt.core.devices import resolve_device
    from fpt.core.runtime import configure_process
    from fpt.models.transformer import FrozenPretrainedTransformer, read_pretrained_config
    from fpt.tasks import check_task_option_types, create_task

    settings = read_pretrained_config(Path(directory))["fpt"]
    if not (isinstance(settings.get("task"), str) and isinstance(settings.get("task_options"), dict)):
        raise FptError(
            f"{directory} records no task to read inputs for; write it with `fpt export RUN_DIR --format hf`"
        )
    check_task_option_types(settings["task_options"], f"{directory}: task_options")
    configure_process(None, str(settings.get("precision")))  # as load_run does for a run directory
    task = create_task(settings["task"], **settings["task_options"])
    model = FrozenPretrainedTransformer.from_pretrained(directory).to(resolve_device(device or "auto"))
    if task.spec != model.spec:
        raise FptError(
            f"task {settings['task']} rebuilt from the options saved in {directory} has other shapes "
            f"({task.spec}) than the model ({model.spec}); were its data files changed?"
        )
    return task, model


def _labels_beside(images: Path) -> Path | None:
    for old, new in (("images-idx3", "labels-idx1"), ("images.idx3", "labels.idx1")):
        if old in images.name:
            candidate = images.with_name(images.name.replace(old, new))
            if candidate.is_file():
                return candidate
    return None


def _rows_from_file(path: Path, task: Task) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(x rows, mask or None, labels or None) from a file in one of the task's formats."""
    name, notes = path.name.lower(), getattr(task, "notes", {})
    if not path.is_file():
        raise FptError(f"--input {path} is not a file")
    if name.endswith(".npz"):
        from fpt.data.npz import read_arrays

        arrays = read_arrays(path)
        if "x" not in arrays:
            raise FptError(
                f"{path}: no array x (found {', '.join(arrays) or 'none'}); save it with np.savez(path, x=...)"
            )
        return arrays["x"], arrays.get("mask"), arrays.get("y")
    if "idx3" in name:
        from fpt.data.idx import read_idx

        labels = _labels_beside(path)
        return read_idx(path), None, None if labels is None else read_idx(labels)
    if name.endswith(".tsv") and task.name == "listops":
        from fpt.data.lra_tsv import read_listops_tsv, tokenize_listops

        sources, labels = read_listops_tsv(path)
        ids, mask, _ = tokenize_listops(sources, max_len=notes.get("max_len"), protocol=notes.get("protocol", "lra"))
        return ids, mask, labels
    if name.endswith(".json") and task.name == "remote-homology":
        from fpt.data.tape import encode_proteins, read_tape_json, records_to_sequences

        sequences, labels = records_to_sequences(read_tape_json(path), path)
        ids, mask, _ = encode_proteins(sequences, max_len=notes.get("max_len", 1024))
        return ids, mask, labels
    if task.spec.regression:
        raise FptError(
            f"--input {path}: a forecast run reads an .npz of windows (x (N, lookback), optional y "
            "(N, horizon)) or a .csv of its own columns with their dates"
        )
    raise FptError(
        f"--input {path}: not a format the {task.name} task reads (an .npz with x, IDX images, "
        "a ListOps .tsv or a TAPE .json)"
    )


def read_inputs(path: str | Path, task: Task, batch_size: int = 256) -> tuple[list[Batch], np.ndarray | None]:
    """The file's examples as model batches (in input order, one example a batch row) and labels."""
    path = Path(path)
    x, mask, y = _rows_from_file(path, unwrapped(task))
    check_rows(x, mask, y, task, path)
    return to_batches(task, x, mask, batch_size), y


_FPT_FOLDER_MARKS = ("config.json", "metrics.jsonl", "spec.json", "fpt_task.json")
_FPT_OWNED = ("metrics.jsonl", "results.csv")  # a run's record of truth; a sweep's table


def check_output(path: str | Path) -> Path:
    """Refuse, before any work, an --out predictions cannot be written to, or must not: a file fpt
    keeps in a run directory, a sweep or an export (a run's metrics.jsonl is its record of truth)."""
    path = Path(path)
    if path.suffix.lower() not in OUTPUT_FORMATS:
        raise FptError(f"--out {path}: write predictions as {', '.join(OUTPUT_FORMATS)}")
    if path.is_dir():
        raise FptError(f"--out {path} is a directory; give a file name ending in {', '.join(OUTPUT_FORMATS)}")
    target = path.resolve()  # through links, to the file really written
    if target.name in _FPT_OWNED and any((target.parent / mark).is_file() for mark in _FPT_FOLDER_MARKS):
        raise FptError(
            f"--out {path} would replace {target.name}, a file fpt keeps in {target.parent}; "
            f"name the predictions otherwise (the default: predictions-INPUT{path.suffix})"
        )
    return path


def training_files(task: Task) -> list[Path]:
    """The file a run's task was built from where --out could name it: a forecast's CSV (npz and
    dataset files end in suffixes predictions are never written to)."""
    source = getattr(unwrapped(task), "notes", {}).get("source")
    return [Path(source)] if isinstance(source, str) else []


def check_replaceable(path: str | Path, inputs: list[Path], force: bool = False) -> None:
    """Refuse, before any work, an --out that would destroy data: one of `inputs` (the file read, a run's
    training data: the run would refuse itself once its checksum changed), whatever --force says, or any
    other existing file unless --force (fpt cannot tell a user's file from its own earlier predictions,
    except under the default name in the run's folder, `default`, which is its own to replace)."""
    path = Path(path)
    target = path.resolve()
    for source in inputs:
        if Path(source).resolve() == target:
            raise FptError(
                f"--out {path} is {source}, which this command reads (an input, or the run's training data); "
                "write the predictions to another file"
            )
    if path.exists() and not force:
        raise FptError(f"--out {path} exists; pass --force to replace it, or name another file")


def write_predictions(path: str | Path, probabilities: torch.Tensor) -> Path:
    """.csv (index, predicted, one probability column per class; single-output tasks), .jsonl
    (one object per example) or .npy (the probabilities, (N, outputs, classes))."""
    path = check_output(path)
    suffix = path.suffix.lower()
    predicted = probabilities.argmax(-1)
    if suffix == ".npy":
        return atomic_write(path, lambda tmp: _save_npy(tmp, probabilities.numpy()))
    if suffix == ".csv":
        if probabilities.shape[1] != 1:
            raise FptError(
                f"--out {path}: this task predicts {probabilities.shape[1]} labels per example; use .jsonl or .npy"
            )
        header = "index,predicted," + ",".join(f"p{c}" for c in range(probabilities.shape[-1]))
        lines = [header] + [
            f"{i},{int(predicted[i, 0])}," + ",".join(f"{p:.6g}" for p in probabilities[i, 0].tolist())
            for i in range(len(probabilities))
        ]
        return atomic_write(path, lambda tmp: tmp.write_text("\n".join(lines) + "\n"))
    import json

    records = [
        json.dumps(
            {
                "index": i,
                "predicted": predicted[i].tolist() if predicted.shape[1] > 1 else int(predicted[i, 0]),
                "probabilities": [[round(p, 6) for p in row] for row in probabilities[i].tolist()],
            },
            allow_nan=False,  # bare NaN is not JSON: fpt.training.inference refused non-finite outputs already
        )
        for i in range(len(probabilities))
    ]
    return atomic_write(path, lambda tmp: tmp.write_text("\n".join(records) + "\n"))


def accuracy(probabilities: torch.Tensor, y: np.ndarray) -> float:
    """The fraction of labels the most probable class gets right: probabilities (N, outputs, classes) against
    integer labels y, (N,) or (N, outputs); with several outputs each label counts once."""
    labels = torch.from_numpy(np.asarray(y, dtype=np.int64)).reshape(len(probabilities), -1)
    return (probabilities.argmax(-1) == labels).float().mean().item()


# --- forecasts: a regression run's windows, or the steps after a CSV series ------------------------


def value_errors(values: torch.Tensor, y: np.ndarray) -> dict[str, float]:
    """MSE and MAE of predicted values (N, outputs) against targets y (N, outputs), over every value."""
    error = values.double() - torch.from_numpy(np.asarray(y, dtype=np.float64)).reshape(values.shape)
    return {"mse": error.square().mean().item(), "mae": error.abs().mean().item()}


def write_values(path: str | Path, values: torch.Tensor) -> Path:
    """A forecast of each window: .csv (index, then t+1 .. t+horizon), .jsonl ({"index", "forecast"}
    per window) or .npy ((N, horizon))."""
    path = check_output(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return atomic_write(path, lambda tmp: _save_npy(tmp, values.numpy()))
    if suffix == ".csv":
        lines = ["index," + ",".join(f"t+{h}" for h in range(1, values.shape[1] + 1))]
        lines += [f"{i}," + ",".join(f"{v:.7g}" for v in row) for i, row in enumerate(values.tolist())]
        return atomic_write(path, lambda tmp: tmp.write_text("\n".join(lines) + "\n"))
    import json

    records = [
        json.dumps({"index": i, "forecast": [float(f"{v:.7g}") for v in row]}, allow_nan=False)
        for i, row in enumerate(values.tolist())
    ]
    return atomic_write(path, lambda tmp: tmp.write_text("\n".join(records) + "\n"))


def _save_npy(tmp: Path, array: np.ndarray) -> None:
    with open(tmp, "wb") as handle:
        np.save(handle, array)


@dataclass
class SeriesForecast:
    """The `horizon` steps after a series' last row, in the file's own units."""

    dates: np.ndarray  # datetime64[s] (horizon,)
    values: np.ndarray  # (horizon, C): a column per channel
    columns: list[str]
    whole_days: bool  # a daily (or coarser) series: dates written without a time
    # the run's intervals in the file's units: {"load-lo-80": (horizon,), "load-hi-80": ..., ...} (Nixtla's names)
    bounds: dict[str, np.ndarray] = field(default_factory=dict)

    def with_intervals(self, intervals: dict | None, std: np.ndarray) -> SeriesForecast:
        """This forecast with each column's bounds at each level the run recorded (fpt.training.intervals:
        half-widths per column and step on the scaled values, times the column's training std)."""
        for level, widths in (intervals or {}).get("halfwidths", {}).items():
            reach = np.asarray(widths, dtype=np.float64).T * std  # (horizon, C) in the file's units
            for c, name in enumerate(self.columns):
                self.bounds[f"{name}-lo-{level}"] = self.values[:, c] - reach[:, c]
                self.bounds[f"{name}-hi-{level}"] = self.values[:, c] + reach[:, c]
        return self

    def date_texts(self) -> list[str]:
        """ISO dates as ETT writes them ("2016-07-01 00:00:00"), or days alone for a daily series."""
        if self.whole_days:
            return list(np.datetime_as_string(self.dates, unit="D"))
        return [text.replace("T", " ") for text in np.datetime_as_string(self.dates, unit="s")]


def series_step(dates: np.ndarray) -> np.timedelta64:
    """A series' time step: the most common gap between consecutive dates (so one missing row or a
    clock change does not move it; ties: the shortest)."""
    gaps, counts = np.unique(np.diff(dates), return_counts=True)
    return gaps[counts.argmax()]


def _csv_header(path: Path) -> list[str] | None:
    import csv

    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            return [name.strip() for name in next(csv.reader(handle, skipinitialspace=True), [])]
    except (OSError, UnicodeDecodeError, csv.Error):
        return None  # read_series_csv says what is wrong with the file


def forecast_csv(model, task: Task, path: str | Path, intervals: dict | None = None) -> SeriesForecast:
    """Forecast the `horizon` steps after a CSV series of the run's own format (its date column and
    the run's columns): each column's last `lookback` values, scaled with the run's training scaler,
    through the model as one window, and its forecast scaled back to the file's units. Dates continue
    the file's step (`series_step`). `intervals`: what the run recorded (summary.json), whose
    half-widths become each column's bounds."""
    from fpt.data.series_csv import read_series_csv

    task, path = unwrapped(task), Path(path)
    notes = task.notes
    columns, lookback, horizon = list(notes["columns"]), notes["lookback"], notes["horizon"]
    header = _csv_header(path) if path.is_file() else None
    missing = [name for name in columns if header is not None and name not in header]
    if missing:
        raise FptError(
            f"{path} has no column {missing[0]!r}; this run forecasts {', '.join(columns)}: give a CSV "
            "with its date column and those columns"
        )
    table = read_series_csv(path, date_column=getattr(task, "date_column", None), columns=columns)
    # by name, never by position: the file's columns may come in another order than the run's
    values = table.values[:, [table.columns.index(name) for name in columns]]
    if len(values) < lookback:
        raise FptError(
            f"{path} has {len(values)} rows; this run forecasts from the last {lookback} "
            f"(--lookback): give at least {lookback} rows"
        )
    mean, std = np.asarray(notes["scaler_mean"], dtype=np.float64), np.asarray(notes["scaler_std"], dtype=np.float64)
    windows = ((values[-lookback:] - mean) / std).T.astype(np.float32)  # (C, lookback): a channel an example
    scaled = predict_values(model, to_batches(task, windows)).numpy().astype(np.float64)  # (C, horizon)
    step = series_step(table.dates)
    dates = table.dates[-1] + step * np.arange(1, horizon + 1)
    whole_days = bool(
        (table.dates == table.dates.astype("datetime64[D]")).all()
        and step % np.timedelta64(1, "D") == np.timedelta64(0, "s")
    )
    return SeriesForecast(dates, scaled.T * std + mean, columns, whole_days).with_intervals(intervals, std)


def write_forecast(path: str | Path, forecast: SeriesForecast) -> Path:
    """.csv (date, then one column per channel, the input's layout, then the interval bounds, if any),
    .jsonl ({"date", column: value, bound: value} per step) or .npy ((horizon, C): the forecast alone)."""
    import csv
    import io
    import json

    path = check_output(path)
    suffix, dates = path.suffix.lower(), forecast.date_texts()
    if suffix == ".npy":
        return atomic_write(path, lambda tmp: _save_npy(tmp, forecast.values))
    if suffix == ".csv":
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(["date", *forecast.columns, *forecast.bounds])
        rows = np.column_stack([forecast.values, *forecast.bounds.values()]).tolist()
        writer.writerows([date, *(f"{v:.7g}" for v in row)] for date, row in zip(dates, rows))
        return atomic_write(path, lambda tmp: tmp.write_text(text.getvalue()))
    names = [*forecast.columns, *forecast.bounds]
    rows = np.column_stack([forecast.values, *forecast.bounds.values()]).tolist()
    records = [
        json.dumps({"date": date, **{c: float(f"{v:.7g}") for c, v in zip(names, row)}}, allow_nan=False)
        for date, row in zip(dates, rows)
    ]
    return atomic_write(path, lambda tmp: tmp.write_text("\n".join(records) + "\n"))


def check_levels_wanted(task: Task, levels) -> None:
    """Refuse --level for a run that has no prediction intervals (a classifier, a forecast of windows)."""
    from fpt.training.intervals import has_intervals

    if levels is not None and not has_intervals(task):
        raise FptError(f"--level: a {unwrapped(task).name} run has no prediction intervals; leave --level out")


def intervals_for(model, task: Task, source: Path, out: Path, levels, recorded: dict | None) -> dict | None:
    """The intervals a forecast writes: those the run `recorded` (summary.json), or at `levels` (percents, as
    statsforecast's `level`; fpt.training.intervals.intervals_at) where given, refused in one line where the
    output holds no intervals (windows from an .npz, an .npy of values)."""
    if levels is None:
        return recorded
    from fpt.training.intervals import intervals_at

    check_levels_wanted(task, levels)
    if not hasattr(unwrapped(task), "collection"):
        if source.suffix.lower() != ".csv":
            raise FptError(
                f"--level: intervals are written for a .csv series to continue, not for windows ({source.name}); "
                "leave --level out"
            )
        if Path(out).suffix.lower() == ".npy":
            raise FptError(f"--level: --out {out} holds the forecast alone; write .csv or .jsonl for its intervals")
    return intervals_at(model, task, levels, recorded)


def predict_forecast(
    model, task: Task, source: Path, out: Path, batch_size: int, intervals: dict | None = None, levels=None
) -> list[str]:
    """`fpt predict` of a forecast run: the lines it prints. A .csv input is a series to continue;
    anything else is read as windows (an .npz with x and optional y). A run over a table of series
    continues each (fpt.serve.future), with the `intervals` the run recorded, or at `levels` (percents,
    e.g. (50, 90, 99); `intervals_for`)."""
    from fpt.core.scores import describe

    collection = hasattr(unwrapped(task), "collection")  # a run over many series: each continued past its end
    if collection and Path(out).suffix.lower() != ".csv":
        raise FptError(f"--out {out}: the future of a table of series is written as a long-format .csv")
    intervals = intervals_for(model, task, source, out, levels, intervals)
    if collection:
        from fpt.serve.future import predict_future

        return predict_future(model, unwrapped(task), source, out, intervals)
    horizon = unwrapped(task).notes["horizon"]
    if source.suffix.lower() == ".csv":
        forecast = forecast_csv(model, task, source, intervals)
        written = write_forecast(out, forecast)
        first, last = forecast.date_texts()[0], forecast.date_texts()[-1]
        lines = [f"forecast of {horizon} steps ({first} to {last}) for {', '.join(forecast.columns)}: {written}"]
        if forecast.bounds and written.suffix.lower() != ".npy":
            from fpt.training.intervals import interval_line

            lines.append(interval_line(intervals, "COLUMN"))
        return lines
    batches, targets = read_inputs(source, task, batch_size)
    values = predict_values(model, batches)
    lines = [f"{len(values)} forecasts of {horizon} steps: {write_values(out, values)}"]
    if targets is not None:
        lines.append(f"{describe(value_errors(values, targets))} on the targets in {source.name}")
    return lines
