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

# the scikit-learn estimators need the sklearn extra: imported when first asked for (the import below
# is for readers of the source, the API reference among them)
from typing import TYPE_CHECKING  # noqa: E402

from fpt.backbones import list_backbones, load_backbone, register_backbone  # noqa: E402
from fpt.core.errors import FptError  # noqa: E402
from fpt.models.ends import TrainableModel
from fpt.models.policy import GROUPS, POLICIES, format_group_table  # noqa: E402
from fpt.models.transformer import FrozenPretrainedTransformer
from fpt.tasks import create_task, list_tasks, register_task  # noqa: E402
from fpt.training.config import TrainConfig  # noqa: E402
from fpt.training.evaluation import evaluate, predict
from fpt.training.lifecycle import load_run, resume, train
from fpt.training.loop import Trainer

if TYPE_CHECKING:
    from fpt.serve.estimators import FPTClassifier, FPTRegressor
    from fpt.serve.forecaster import FPTForecaster
_ESTIMATORS = ("FPTClassifier", "FPTRegressor")


def __getattr__(name: str):
    if name in _ESTIMATORS:
        from fpt.serve import estimators

        return getattr(estimators, name)
    if name == "FPTForecaster":  # the sktime forecaster needs the timeseries extra: imported when asked for
        from fpt.serve.forecaster import FPTForecaster

        return FPTForecaster
    raise AttributeError(f"module 'fpt' has no attribute {name!r}")


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
