"""The task registry: `@register_task(name)`, `create_task(name, **options)`, `list_tasks()`, and
the task options the CLI and sweeps expose."""

from __future__ import annotations

import inspect
from typing import Callable

from fpt.errors import FptError, check_type
from fpt.tasks.base import Task

_TASKS: dict[str, Callable[..., Task]] = {}

# The task options the CLI and sweeps expose: name -> (type, help). Only those given are passed,
# so each task keeps its own defaults; a task refuses options it does not take (`task_options`).
TASK_OPTIONS: dict[str, tuple[type, str]] = {
    "n_bits": (int, "bit tasks: bits per string"),
    "n_strings": (int, "bit-memory: strings to memorise"),
    "patch_size": (int, "values (bits, pixels, time steps) per token"),
    "mask_prob": (float, "bit-memory: share of bits masked in the query"),
    "eval_size": (int, "generated tasks: held-out examples"),
    "data_dir": (str, "folder holding the task's files (default: the fpt cache)"),
    "protocol": (str, "listops: lra | paper; cifar10-lra: paper | lra"),
    "max_len": (int, "longest sequence kept; longer ones are cut and counted"),
    "augment": (
        bool,
        "image augmentation on training batches (cifar10: on by default, the paper's; "
        "mnist: shifts; fashion-mnist: shifts and mirroring)",
    ),
    "test_path": (str, "npz: a second file used as the test split"),
    "heldout_fraction": (float, "npz without --test-path: share of the file held out"),
    "dataset": (str, "ucr: UCR/UEA dataset, bundled with sktime or NAME/ under --data-dir; ett: ETTh1 or ETTh2"),
    "znorm": (bool, "ucr: z-normalise each series per channel"),
    "lookback": (int, "forecasts: time steps of input (ETTh: 336, One Fits All's)"),
    "horizon": (int, "forecasts: time steps predicted (the published tables: 96, 192, 336, 720)"),
    "patch_stride": (int, "forecasts: time steps between the starts of two patches (default 8)"),
    "date_column": (str, "forecast:FILE.csv: the column of dates (default: one named date, else the first)"),
    "columns": (str, "forecast:FILE.csv: the numeric columns to forecast, comma-separated (default: all)"),
    "val_size": (
        int,
        "mnist, fashion-mnist, cifar10, ucr: hold out this many training examples as a 'val' split "
        "and evaluate on it while training (choose settings there, not on test)",
    ),
}


def task_option_types(key: str) -> tuple[type, ...]:
    """The types a value of task option `key` may have (an option not listed above: text)."""
    kind = TASK_OPTIONS[key][0] if key in TASK_OPTIONS else str
    return (int, float) if kind is float else (kind,)


def check_task_option_types(options: dict, where: str) -> None:
    """Task options read from a file (a run's config.json, an export's settings), each of its type
    or null (a run records every option, those left to the task's default as null); a task given a
    wrong one fails deep inside, not in one line."""
    for key, value in options.items():
        if key in TASK_OPTIONS:
            check_type(value, (*task_option_types(key), type(None)), f"{where}: {key}")


def register_task(name: str):
    """Class or factory decorator: make a task available under `name`."""

    def wrap(factory):
        _TASKS[name] = factory
        return factory

    return wrap


def list_tasks() -> list[str]:
    """The registered task names, sorted (a prefixed task such as `npz:PATH` is listed by its prefix)."""
    return sorted(_TASKS)


def _registered_name(name: str, options: dict) -> tuple[str, dict]:
    """`npz:PATH` and `forecast:PATH` are those tasks with their path, `ett:NAME` and `ucr:NAME` the
    ett and ucr tasks with their dataset; every other name is looked up as it is."""
    prefix, _, rest = name.partition(":")
    if rest and prefix in ("npz", "forecast"):
        return prefix, {**options, "path": rest}
    if rest and prefix in ("ett", "ucr"):
        return prefix, {**options, "dataset": rest}
    return name, options


def task_options(name: str, options: dict) -> dict:
    """Every option of the task with defaults filled in; options it does not take are an error."""
    name, options = _registered_name(name, options)
    if name not in _TASKS:
        raise FptError(f"unknown task {name!r}; choose one of {', '.join(list_tasks())}")
    accepted = inspect.signature(_TASKS[name]).parameters
    unknown = sorted(k for k in options if k not in accepted)
    if unknown:
        raise FptError(f"task {name!r} takes no option {', '.join(unknown)}; it takes {', '.join(accepted)}")
    try:
        bound = inspect.signature(_TASKS[name]).bind(**options)
    except TypeError:  # a required option left out; only npz has one, its path
        hint = f" (--task {name}:PATH)" if name in ("npz", "forecast") else ""
        missing = [k for k, p in accepted.items() if p.default is inspect.Parameter.empty and k not in options]
        raise FptError(f"task {name!r} needs {', '.join(missing)}{hint}") from None
    bound.apply_defaults()
    return dict(bound.arguments)


def create_task(name: str, **options) -> Task:
    """Build a task by name with its options (see `task_options`)."""
    resolved = task_options(name, options)
    return _TASKS[_registered_name(name, options)[0]](**resolved)
