"""The task registry: `@register_task(name)`, `create_task(name, **options)`, `list_tasks()`, and
the task options the CLI and sweeps expose (`TASK_OPTIONS`: each option's type read from the
factories' signatures, its help written once in `OPTION_HELP`)."""

from __future__ import annotations

import inspect
import typing
from typing import Callable

from fpt.core.choices import BUILTIN_TASK_OPTIONS, TASK_NAMES, TASK_OPTIONS
from fpt.core.errors import FptError, check_type
from fpt.tasks.base import Task

_TASKS: dict[str, Callable[..., Task]] = {}

# The help of each task option the CLI and sweeps expose, written once (with its type, in
# fpt.core.choices, where the CLI reads it without importing a task); an option's type comes from the
# registered factories' signatures (`register_task`), so an option a factory gains needs no line in a
# table to be offered (only its help there: `tests/tasks/test_tasks.py` asks for one, and the type it has).
OPTION_HELP: dict[str, str] = {key: help_text for key, (_, help_text) in BUILTIN_TASK_OPTIONS.items()}

# Factory parameters that are not options: given in the task's name, or pinned by the task itself.
NOT_OPTIONS = frozenset({"path", "sha256"})  # npz:PATH, forecast:PATH; a forecast's file hash

# The task options the CLI and sweeps expose: name -> (type, help), filled by `register_task` from
# each factory's parameters (fpt.core.choices.TASK_OPTIONS, the same dict, starts with the built-in
# tasks' so the CLI can list them unregistered). Only those given are passed, so each task keeps its
# own defaults; a task refuses options it does not take (`task_options`).
_OPTION_TYPES = (bool, int, float, str)  # what a command line and a config.json can give
_OWNERS: dict[str, str] = {}  # option -> the first task that declared it (for a conflict's message)


def factory_option_types(name: str, factory: Callable) -> dict[str, type]:
    """Option -> type from a task factory's (or task class's) signature: each annotation with None
    taken out (`int | None` is int: None leaves the choice to the task). A parameter without one
    plain type (bool, int, float, str), or without an annotation, is no option: a command line or
    a config.json cannot give it, so it is set from Python alone (`create_task(name, key=value)`)."""
    types = {}
    try:
        parameters = inspect.signature(factory, eval_str=True).parameters
    except (NameError, TypeError, SyntaxError):  # an annotation named only under TYPE_CHECKING, say
        parameters = inspect.signature(factory).parameters  # left as text: those are Python-only
    for key, parameter in parameters.items():
        annotation = parameter.annotation
        kinds = [t for t in (typing.get_args(annotation) or (annotation,)) if t is not type(None)]
        if key not in NOT_OPTIONS and len(kinds) == 1 and kinds[0] in _OPTION_TYPES:
            types[key] = kinds[0]
    return types


def _add_options(name: str, factory: Callable) -> None:
    """Add a factory's options to TASK_OPTIONS (in OPTION_HELP's order), refusing one that another
    task gives another type, before anything is registered."""
    types = factory_option_types(name, factory)
    for key, kind in types.items():
        if key in TASK_OPTIONS and TASK_OPTIONS[key][0] is not kind:
            raise FptError(
                f"task {name!r} gives option {key!r} the type {kind.__name__}, task {_OWNERS[key]!r} "
                f"{TASK_OPTIONS[key][0].__name__}; one option has one type: rename one of them"
            )
    for key, kind in types.items():
        _OWNERS.setdefault(key, name)
        TASK_OPTIONS[key] = (kind, OPTION_HELP.get(key, f"{name}: see the task's docstring"))
    order = {key: i for i, key in enumerate(OPTION_HELP)}
    ordered = sorted(TASK_OPTIONS.items(), key=lambda item: order.get(item[0], len(order)))
    TASK_OPTIONS.clear()  # the same dict, in place: the CLI and config import it by name
    TASK_OPTIONS.update(ordered)


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


# Task options with a lower bound, checked without building the task (no data read): a sweep checks
# every cell's options before its first cell starts, and a task gets them checked once here.
WHOLE_AT_LEAST_ONE = (
    "n_bits", "n_strings", "patch_size", "eval_size", "max_len", "lookback", "horizon", "patch_stride",
)  # fmt: skip


def check_task_option_values(options: dict, chosen: bool = False) -> None:
    """Refuse, in one line, a count option (`WHOLE_AT_LEAST_ONE`) of `options` that is not a whole number
    of at least 1. None leaves the choice to the task, unless `chosen`: a task that has made its choices
    (fpt.tasks.forecasting.check_window_options) refuses a None as one that no rule of it chose (ETT's
    horizon, say), in the same words."""
    for key in WHOLE_AT_LEAST_ONE:
        if key not in options or (options[key] is None and not chosen):
            continue  # the task's to choose
        value = options[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FptError(f"--{key.replace('_', '-')} must be a whole number of at least 1, got {value!r}")


def register_task(name: str):
    """Class or factory decorator: make a task available under `name`; its parameters (but `path`
    and `sha256`) become task options, typed by their annotations (`factory_option_types`)."""

    def wrap(factory):
        _add_options(name, factory)
        _TASKS[name] = factory
        TASK_NAMES.add(name)
        return factory

    return wrap


def task_factory(name: str) -> Callable[..., Task]:
    """The factory (function or Task class) registered under `name`, as `create_task` calls it."""
    if name not in _TASKS:
        raise FptError(f"unknown task {name!r}; choose one of {', '.join(list_tasks())}")
    return _TASKS[name]


def list_tasks() -> list[str]:
    """The registered task names, sorted (a prefixed task such as `npz:PATH` is listed by its prefix)."""
    return sorted(_TASKS)


PATH_PREFIXES = ("npz", "forecast", "panel")  # --task PREFIX:PATH is that task reading PATH
DATASET_PREFIXES = ("ett", "ucr", "m1", "m3", "tourism")  # --task PREFIX:NAME is that task's dataset NAME


def _registered_name(name: str, options: dict) -> tuple[str, dict]:
    """`npz:PATH` and `forecast:PATH` are those tasks with their path, `ett:NAME` and `ucr:NAME` the
    ett and ucr tasks with their dataset; every other name is looked up as it is."""
    prefix, _, rest = name.partition(":")
    if rest and prefix in PATH_PREFIXES:
        return prefix, {**options, "path": rest}
    if rest and prefix in DATASET_PREFIXES:
        return prefix, {**options, "dataset": rest}
    return name, options


def task_label(name: str, options: dict) -> str:
    """One spelling of a task for tables: `ucr:NAME` whether the run was given `--task ucr:NAME` or
    `--task ucr --dataset NAME` (likewise ett); any other name as it is."""
    registered, options = _registered_name(name, options)
    dataset = options.get("dataset")
    return f"{registered}:{dataset}" if registered in DATASET_PREFIXES and dataset else name


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
        hint = f" (--task {name}:PATH)" if name in PATH_PREFIXES else ""
        missing = [k for k, p in accepted.items() if p.default is inspect.Parameter.empty and k not in options]
        raise FptError(f"task {name!r} needs {', '.join(missing)}{hint}") from None
    bound.apply_defaults()
    check_task_option_values(bound.arguments)
    return dict(bound.arguments)


def create_task(name: str, **options) -> Task:
    """Build a task by name with its options (see `task_options`)."""
    resolved = task_options(name, options)
    return _TASKS[_registered_name(name, options)[0]](**resolved)
