"""fpt: Frozen Pretrained Transformers.

Take a transformer pretrained on language, freeze its attention and feed-forward weights, and
train only a new input layer, a new output layer, the layer norms and the positional embeddings.

    import fpt
    summary, run_dir = fpt.train(fpt.TrainConfig(task="bit-xor", backbone="minilm", target_accuracy=0.99))

or piece by piece:

    backbone = fpt.load_backbone("minilm")
    task = fpt.create_task("bit-memory", n_bits=1000, patch_size=50)
    model = fpt.FrozenPretrainedTransformer(backbone, task.spec, policy="fpt")
    trainer = fpt.Trainer(model, task, fpt.TrainConfig(steps=500))
    trainer.fit()
"""

from fpt.backbones import list_backbones, load_backbone
from fpt.errors import FptError
from fpt.groups import GROUPS, POLICIES, format_group_table
from fpt.model import FrozenPretrainedTransformer
from fpt.tasks import create_task, list_tasks
from fpt.train import Trainer, TrainConfig, evaluate, load_run, resume, train

__version__ = "0.1.0"

__all__ = [
    "GROUPS", "POLICIES", "FptError", "FrozenPretrainedTransformer", "TrainConfig", "Trainer",
    "create_task", "evaluate", "format_group_table", "list_backbones", "list_tasks", "load_backbone",
    "load_run", "resume", "train",
]
