"""Tasks: the contract (base), dataset machinery (arrays), one module per family of tasks, length
bucketing (bucketing) and the registry (registry); importing this package registers every task."""

from fpt.tasks import bits, collections, forecasting, images, sequences, ucr  # noqa: F401  (each module registers its tasks)
from fpt.tasks.base import Batch, Task, TaskSpec
from fpt.tasks.registry import (
    TASK_OPTIONS,
    check_task_option_types,
    create_task,
    list_tasks,
    register_task,
    task_factory,
    task_option_types,
    task_options,
)

__all__ = [
    "TASK_OPTIONS",
    "Batch",
    "Task",
    "TaskSpec",
    "check_task_option_types",
    "create_task",
    "list_tasks",
    "register_task",
    "task_factory",
    "task_option_types",
    "task_options",
]
