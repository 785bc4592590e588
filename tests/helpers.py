"""Helpers shared by the test modules: files in each real on-disk format, written here, and the
check that an error is one line naming what it should. Backbones: see conftest.py."""

from __future__ import annotations

import gzip
import json
import struct
import subprocess
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from fpt.core.errors import FptError
from fpt.data import cifar, tape
from fpt.experiments.paper import VARIANTS
from fpt.experiments.shuffled import SHUFFLE_FILE


def train_argv(backbone, out, *more) -> list[str]:
    """`fpt train` arguments for a small Bit XOR run (4 bits, batches of 4) into `out`."""
    return [
        "train",
        "--task",
        "bit-xor",
        "--n-bits",
        "4",
        "--eval-size",
        "8",
        "--backbone",
        backbone,
        "--batch-size",
        "4",
        "--no-progress",
        "--out",
        str(out),
        *more,
    ]


def wait_for(started: Callable[[], bool], process: subprocess.Popen, what: str, seconds: float = 600) -> None:
    """Poll `started()` while `process` runs. If it exits first, or `seconds` pass, stop it and fail with
    the tail of its stderr. Never wait on a process that will not end: a failure message that called
    communicate() without a timeout on a 100,000-step run hung a loaded machine's test for good."""
    deadline = time.monotonic() + seconds
    while not started():
        if process.poll() is not None or time.monotonic() > deadline:
            process.terminate()  # SIGTERM first: fpt stops its ranks or its Ray cluster on it
            try:
                err = process.communicate(timeout=60)[1]
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
                err = "(stderr unread: the process or a child of it held it open)"
            err = err.decode(errors="replace") if isinstance(err, bytes) else err or ""
            pytest.fail(f"{what} within {seconds:.0f} s (exit status {process.poll()}): {err[-3000:]}")
        time.sleep(0.2)


def one_line_error(capsys) -> str:
    """What a command wrote to stderr: one line starting `fpt: error: `, no traceback."""
    err = capsys.readouterr().err.strip()
    assert err.startswith("fpt: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def raises_naming(fn, *names: object) -> str:
    """Call fn, expect one FptError line that mentions every name."""
    with pytest.raises(FptError) as info:
        fn()
    message = str(info.value)
    assert "\n" not in message
    for name in names:
        assert str(name) in message, (name, message)
    return message


IDX_CODES = {
    np.dtype("u1"): 0x08,
    np.dtype("i1"): 0x09,
    np.dtype("i2"): 0x0B,
    np.dtype("i4"): 0x0C,
    np.dtype("f4"): 0x0D,
    np.dtype("f8"): 0x0E,
}


def idx_bytes(array: np.ndarray) -> bytes:
    header = bytes([0, 0, IDX_CODES[array.dtype], array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write_idx(path: Path, array: np.ndarray) -> Path:
    data = idx_bytes(array)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def write_mnist(directory: Path, split: str, n: int, gz: bool = False, spelling: str = "-", seed: int = 0):
    prefix = {"train": "train", "test": "t10k"}[split]
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n).astype(np.uint8)
    suffix = ".gz" if gz else ""
    write_idx(directory / f"{prefix}-images{spelling}idx3-ubyte{suffix}", images)
    write_idx(directory / f"{prefix}-labels{spelling}idx1-ubyte{suffix}", labels)
    return images, labels


def cifar_batch(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 3072), dtype=np.uint8), rng.integers(0, 10, n)


def write_binary_batches(directory: Path, n: int = 2) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    directory.mkdir(parents=True, exist_ok=True)
    batches = {}
    for seed, name in enumerate(cifar.SPLIT_FILES["train"] + cifar.SPLIT_FILES["test"]):
        data, labels = cifar_batch(n, seed)
        records = np.concatenate([labels.astype(np.uint8)[:, None], data], axis=1)
        (directory / f"{name}.bin").write_bytes(records.tobytes())
        batches[name] = data, labels
    return batches


def homology_records(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    letters = np.array(list("ACDEFGHIKLMNPQRSTVWY"))
    records = []
    for i in range(n):
        primary = "".join(rng.choice(letters, rng.integers(3, 12)))
        records.append(
            {
                "id": f"d{i}",
                "primary": primary,
                "protein_length": len(primary),
                "class_label": 1,
                "fold_label": int(rng.integers(0, tape.N_FOLDS)),
                "evolutionary": rng.random((len(primary), 30)).astype(np.float32),
            }
        )
    return records


ETT_COLUMNS = ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]


def write_ett_csv(path: Path, hours: int = 48, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic CSV in ETTh's layout (date + ETT_COLUMNS, hourly from 2016-07-01 00:00:00);
    returns its dates (datetime64[s]) and values (float64, written with repr: read back exactly)."""
    dates = np.datetime64("2016-07-01T00:00:00") + np.arange(hours) * np.timedelta64(1, "h")
    values = np.random.default_rng(seed).normal(5.0, 3.0, size=(hours, len(ETT_COLUMNS)))
    lines = [",".join(["date", *ETT_COLUMNS])]
    lines += [",".join([str(d).replace("T", " "), *map(repr, row.tolist())]) for d, row in zip(dates, values)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return dates, values


def write_panel_csv(path: Path, lengths=(48, 60, 36, 10), seed: int = 1) -> None:
    """A long-format table (unique_id, ds, y) a `--task panel:FILE` run reads: monthly series shop0, shop1, ...
    from 2015-01-01, one per length, each a random walk on its own level with a yearly cycle."""
    rng = np.random.default_rng(seed)
    lines = ["unique_id,ds,y"]
    for i, n in enumerate(lengths):
        dates = np.arange(np.datetime64("2015-01"), np.datetime64("2015-01") + n, dtype="datetime64[M]")
        values = 50.0 * (i + 1) + np.cumsum(rng.normal(size=n)) + 4 * np.sin(np.arange(n) * 2 * np.pi / 12)
        lines += [f"shop{i},{d}-01,{v:.4f}" for d, v in zip(dates, values)]
    path.write_text("\n".join(lines) + "\n")


def write_seasonal_csv(
    path: Path, rows: int, columns=("load", "temp"), period: int = 24, step=np.timedelta64(1, "h"), seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """A CSV a forecast task reads (date + numeric columns, `step` apart from 2020-01-01 00:00): each column
    a cycle of `period` steps on its own level and scale, with noise; returns its dates (datetime64[s]) and
    values (float64, written with repr: read back exactly)."""
    rng = np.random.default_rng(seed)
    t = np.arange(rows)
    values = np.stack(
        [
            (10.0 * (c + 1)) + (c + 2) * np.sin(2 * np.pi * t / period) + rng.normal(0, 0.3, rows)
            for c in range(len(columns))
        ],
        axis=1,
    )
    dates = np.datetime64("2020-01-01T00:00:00") + t * step
    lines = [",".join(["date", *columns])]
    lines += [",".join([str(d).replace("T", " "), *map(repr, row.tolist())]) for d, row in zip(dates, values)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return dates, values


def write_arm_run(
    root: Path,
    arm: str,
    seed: int,
    accuracy: float,
    shuffled: float | None,
    params: int,
    task="bit-xor",
    options=None,
    majority: float | None = None,
    run: Path | None = None,
    lr: float | None = None,
    watched: float | None = None,
    device: str | None = "cpu",
):
    """A finished controls run's files as `fpt train` writes them (config, summary, metrics and,
    given `shuffled`, shuffled.json): the table reads nothing else. `run`: its folder (default
    ROOT/task=...,variant=...,seed=...); `lr`: written to its config; `watched`: its final accuracy on
    the held-out split it was watched on (default: `accuracy`); `device`: where it trained (None: no such key)."""
    run = run or root / f"task={task},variant={arm},seed={seed}"
    run.mkdir(parents=True)
    config = {"task": task, "model": "fpt", "body": "backbone", "init": "pretrained", "policy": "fpt"}
    config["task_options"] = options or {}
    config.update(VARIANTS[arm], seed=seed, backbone="minilm", recipe="fast")
    if device is not None:  # None: a run written before config.json named its device
        config["device"] = device
    if lr is not None:
        config["lr"] = lr
    if config["body"] != "backbone":
        config["policy"] = "full"  # as a control's run records it
    (run / "config.json").write_text(json.dumps(config))
    result = {"split": "test", "accuracy": accuracy, "loss": 0.1, "examples": 100}
    if majority is not None:
        result["majority_share"] = majority
    final = {**result, "split": "heldout", "accuracy": accuracy if watched is None else watched}
    summary = {"step": 20, "final": final, "test": {"test": result}}
    summary.update(trained_params=params, total_params=1000, wall_time_s=3.0, status="completed")
    (run / "summary.json").write_text(json.dumps(summary))
    records = [{"step": 10, "elapsed_s": 1.0, "accuracy": 0.5}, {"step": 20, "elapsed_s": 3.0, "accuracy": accuracy}]
    records = [{**r, "split": "heldout", "loss": 0.1} for r in records]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if shuffled is not None:
        mixed = {
            "step": 20,
            "seed": 0,
            "splits": {"test": {"ordered": result, "shuffled": {**result, "accuracy": shuffled}}},
        }
        (run / SHUFFLE_FILE).write_text(json.dumps(mixed))


def table_row_line(text: str, task_heading: str, arm: str) -> str:
    """The line of `arm` in the block of the controls table headed `task_heading`."""
    block = text.split(f"#### {task_heading}")[1].split("####")[0]
    return next(line for line in block.splitlines() if line.startswith(f"| {arm} |"))


def table_row(text: str, task_heading: str, arm: str) -> list[str]:
    """That line's cells, stripped."""
    return [cell.strip() for cell in table_row_line(text, task_heading, arm).strip("|").split("|")]


def write_ts(
    path: Path, cases: list[tuple[list[list[float | None]], str]], *, name: str = "Tiny", label_line: str | None = None
) -> Path:
    """A .ts file as timeseriesclassification.com writes it: header, then one case a line,
    channels separated by ':', values by ',', the class label last, '?' for a missing value."""
    channels = len(cases[0][0])
    lengths = {len(c) for series, _ in cases for c in series}
    labels = sorted({label for _, label in cases})
    header = [
        "# written by fpt's tests",
        f"@problemName {name}",
        "@timeStamps false",
        f"@missing {'true' if any(v is None for s, _ in cases for c in s for v in c) else 'false'}",
        f"@univariate {'true' if channels == 1 else 'false'}",
    ]
    if channels > 1:
        header.append(f"@dimensions {channels}")
    header.append(f"@equalLength {'true' if len(lengths) == 1 else 'false'}")
    if len(lengths) == 1:
        header.append(f"@seriesLength {lengths.pop()}")
    header += [label_line or f"@classLabel true {' '.join(labels)}", "@data"]
    rows = [
        ":".join(",".join("?" if v is None else repr(float(v)) for v in channel) for channel in series) + f":{label}"
        for series, label in cases
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(header + rows) + "\n")
    return path
