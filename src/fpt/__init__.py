"""fpt: Frozen Pretrained Transformers.

Take a transformer pretrained on language, freeze its attention and feed-forward weights, and
train only a new input layer, a new output layer, the layer norms and the positional embeddings.

    import fpt
    summary, run_dir = fpt.train(fpt.TrainConfig(task="bit-xor", backbone="minilm", target_accuracy=0.99))

or piece by piece:

    task = fpt.create_task("bit-memory", n_bits=1000, patch_size=50)
    backbone = fpt.load_backbone("minilm", seq_len=task.spec.seq_len)
    model = fpt.FrozenPretrainedTransformer(backbone, task.spec, policy="fpt")
    trainer = fpt.Trainer(model, task, fpt.TrainConfig(steps=500))
    trainer.fit()
"""

__version__ = "0.1.0"

# Every name below is imported when first used (PEP 562): `import fpt`, and the `fpt` command's --help,
# usage errors and `fpt backbones`, then need neither torch nor transformers (issue 59: `fpt --help` took
# 2.5-3.0 s on two busy cores, 1.3x a bare `import torch`, when this module imported them all). The
# imports under TYPE_CHECKING are for type checkers and readers of the source, the API reference among
# them. The scikit-learn estimators need the sklearn extra, as before only when asked for.
import importlib
from typing import TYPE_CHECKING

from fpt.core.errors import FptError

if TYPE_CHECKING:
    from fpt.backbones import list_backbones, load_backbone, register_backbone
    from fpt.models.ends import TrainableModel
    from fpt.models.policy import GROUPS, POLICIES, format_group_table
    from fpt.models.transformer import FrozenPretrainedTransformer
    from fpt.tasks import create_task, list_tasks, register_task
    from fpt.training.config import TrainConfig
    from fpt.training.evaluation import evaluate, predict
    from fpt.training.lifecycle import load_run, resume, train
    from fpt.training.loop import Trainer
if TYPE_CHECKING:  # the sklearn extra's, last (the API reference lists them in this order)
    from fpt.serve.estimators import FPTClassifier, FPTRegressor
    from fpt.serve.forecaster import FPTForecaster  # the timeseries extra's

_HOMES = {
    "fpt.backbones": ("list_backbones", "load_backbone", "register_backbone"),
    "fpt.models.ends": ("TrainableModel",),
    "fpt.models.policy": ("GROUPS", "POLICIES", "format_group_table"),
    "fpt.models.transformer": ("FrozenPretrainedTransformer",),
    "fpt.serve.estimators": ("FPTClassifier", "FPTRegressor"),
    "fpt.serve.forecaster": ("FPTForecaster",),
    "fpt.tasks": ("create_task", "list_tasks", "register_task"),
    "fpt.training.config": ("TrainConfig",),
    "fpt.training.evaluation": ("evaluate", "predict"),
    "fpt.training.lifecycle": ("load_run", "resume", "train"),
    "fpt.training.loop": ("Trainer",),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}


# the packages `import fpt` used to bring in with those names: `fpt.tasks.create_task` after `import fpt` works still
_PACKAGES = ("backbones", "core", "data", "models", "tasks", "tracking", "training")


def __getattr__(name: str):
    if name in _PACKAGES:
        return importlib.import_module(f"fpt.{name}")
    if name not in _HOME:
        raise AttributeError(f"module 'fpt' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "FPTClassifier",
    "FPTForecaster",
    "FPTRegressor",
    "GROUPS",
    "POLICIES",
    "FptError",
    "FrozenPretrainedTransformer",
    "TrainConfig",
    "TrainableModel",
    "Trainer",
    "create_task",
    "evaluate",
    "format_group_table",
    "list_backbones",
    "list_tasks",
    "load_backbone",
    "load_run",
    "predict",
    "register_backbone",
    "register_task",
    "resume",
    "train",
]
