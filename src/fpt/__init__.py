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

from fpt.backbones import list_backbones, load_backbone, register_backbone  # noqa: E402
from fpt.config import TrainConfig  # noqa: E402
from fpt.errors import FptError  # noqa: E402
from fpt.model import FrozenPretrainedTransformer, TrainableModel  # noqa: E402
from fpt.policy import GROUPS, POLICIES, format_group_table  # noqa: E402
from fpt.tasks import create_task, list_tasks, register_task  # noqa: E402
from fpt.training import Trainer, evaluate, load_run, predict, resume, train  # noqa: E402

__all__ = [
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
