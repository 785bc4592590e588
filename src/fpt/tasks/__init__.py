"""Task registry: `create_task(name, **options)`, `list_tasks()`."""

from __future__ import annotations

import inspect
from typing import Callable

from fpt.errors import FptError
from fpt.tasks.base import Batch, Task, TaskSpec

_TASKS: dict[str, Callable[..., Task]] = {}


def register_task(name: str):
    """Class or factory decorator: make a task available under `name`."""

    def wrap(factory):
        _TASKS[name] = factory
        return factory

    return wrap


def list_tasks() -> list[str]:
    return sorted(_TASKS)


def create_task(name: str, **options) -> Task:
    """Build a task by name; options the task does not take are an error, not ignored."""
    if name not in _TASKS:
        raise FptError(f"unknown task {name!r}; choose one of {', '.join(list_tasks())}")
    factory = _TASKS[name]
    accepted = inspect.signature(factory).parameters
    unknown = sorted(k for k in options if k not in accepted)
    if unknown:
        raise FptError(f"task {name!r} takes no option {', '.join(unknown)}; it takes {', '.join(accepted)}")
    return factory(**options)


from fpt.tasks import bits  # noqa: E402,F401  (registers the bit tasks)

__all__ = ["Batch", "Task", "TaskSpec", "create_task", "list_tasks", "register_task"]
