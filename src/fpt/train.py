"""Training: a config, the loop (micro-batches, clipping, evaluation on the whole held-out split,
checkpoints, resume), and `train()` / `resume()` that build everything from a config."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from fpt.backbones import INITS, load_backbone
from fpt.checkpoint import CHECKPOINT_NAME, load_checkpoint, restore, save_checkpoint
from fpt.errors import FptError
from fpt.groups import parse_policy
from fpt.model import POOLINGS, FrozenPretrainedTransformer, check_dropout_rates
from fpt.runs import (append_metrics, create_run_dir, default_run_dir, existing_run_dir, read_json,
                      truncate_metrics, write_json)
from fpt.speed import LengthBucketedTask, compute_dtype, limit_heap_fragmentation, set_threads
from fpt.baselines import MODELS, Baseline, build_baseline
from fpt.tasks import Task, create_task, task_options
from fpt.tasks.base import Batch


# Options only transformer models take: refused for a baseline --model, and left out of a sweep's
# baseline cells when the sweep sets them for every cell.
TRANSFORMER_ONLY_OPTIONS = ("precision", "checkpointing", "compile")


@dataclass
class TrainConfig:
    """Everything that defines a run; saved as config.json and enough to rebuild it."""

    task: str = "bit-xor"
    task_options: dict = field(default_factory=dict)  # e.g. {"n_bits": 1000, "patch_size": 50}
    model: str = "fpt"  # fpt (a frozen backbone) | lstm | lstm* | cnn | cnn-matched (fully trained baselines)
    backbone: str = "minilm"
    init: str = "pretrained"  # pretrained | random | stats
    policy: str = "fpt"  # a policy name or a comma list of groups
    layers: int | None = None  # keep only the first K transformer blocks
    pooling: str = "last"  # last (the paper's last-k tokens) | mean
    extra_positions: bool = False  # a learned position table in the embedder (for RoPE backbones)
    dropout: float = 0.1
    attention_dropout: float | None = None  # on attention probabilities (None: --dropout); 0 is much faster on long inputs
    steps: int = 2000
    batch_size: int = 16
    micro_batch_size: int | None = None  # split each batch to bound memory; same gradients
    lr: float = 1e-3
    grad_clip: float = 1.0
    eval_every: int = 100
    eval_batch_size: int = 256
    target_accuracy: float | None = None  # stop once held-out accuracy reaches this
    seed: int = 0
    # Speed (fpt.speed). Exact: checkpointing, bucket_window, threads; opt-in numerics: precision, compile.
    precision: str = "fp32"  # fp32 | bf16 (frozen weights in bfloat16, backbone under autocast)
    checkpointing: bool = False  # recompute each block in backward: much less memory, ~1/3 more compute
    compile: bool = False  # torch.compile the backbone (eager where unavailable)
    bucket_window: int | None = None  # batch variable-length sequences of similar length, per window of N batches
    threads: int | None = None  # torch intra-op threads (default: one per core)

    def validate(self) -> None:
        for key in ("steps", "batch_size", "eval_every", "eval_batch_size"):
            if getattr(self, key) < 1:
                raise FptError(f"--{key.replace('_', '-')} must be at least 1, got {getattr(self, key)}")
        if self.micro_batch_size is not None and not 1 <= self.micro_batch_size <= self.batch_size:
            raise FptError(f"--micro-batch-size must be between 1 and --batch-size ({self.batch_size})")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise FptError(f"--lr must be a positive number, got {self.lr}")
        check_dropout_rates(self.dropout, self.attention_dropout)
        if not self.grad_clip > 0:
            raise FptError(f"--grad-clip must be positive, got {self.grad_clip}")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise FptError(f"--target-accuracy is a fraction in (0, 1], got {self.target_accuracy}")
        # names are checked here too, so a typo fails before a backbone is loaded
        parse_policy(self.policy)
        if self.init not in INITS:
            raise FptError(f"unknown --init {self.init!r}; choose one of {', '.join(INITS)}")
        if self.pooling not in POOLINGS:
            raise FptError(f"unknown --pooling {self.pooling!r}; choose one of {', '.join(POOLINGS)}")
        compute_dtype(self.precision)
        if self.model not in MODELS:
            raise FptError(f"unknown --model {self.model!r}; choose one of {', '.join(MODELS)}")
        defaults = {field.name: field.default for field in dataclasses.fields(self)}
        if self.model != "fpt" and any(getattr(self, k) != defaults[k] for k in TRANSFORMER_ONLY_OPTIONS):
            raise FptError(f"--precision, --checkpointing and --compile apply to transformer models, not --model {self.model}")
        if self.bucket_window is not None and self.bucket_window < 1:
            raise FptError(f"--bucket-window must be at least 1, got {self.bucket_window}")
        if self.threads is not None and self.threads < 1:
            raise FptError(f"--threads must be at least 1, got {self.threads}")

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise FptError(f"config has unknown keys {', '.join(unknown)}")
        return cls(**data)


def build(config: TrainConfig) -> tuple[Task, FrozenPretrainedTransformer]:
    """Task + backbone + model from a config, with the policy applied. Writes nothing."""
    config.validate()
    set_threads(config.threads)
    # Subnormal floats take a slow path on x86 CPUs: an LSTM baseline on Bit Memory went from
    # 1.9 to over 7 s a step within 150 steps. Flushing them to zero keeps it at 1.9 s.
    torch.set_flush_denormal(True)
    task = create_task(config.task, **config.task_options)
    if getattr(getattr(task, "train", None), "lengths", None) is not None:  # batches of varying length
        limit_heap_fragmentation()
    if config.bucket_window is not None:
        task = LengthBucketedTask(task, config.bucket_window)
    if config.model != "fpt":
        return task, _build_baseline(config, task)
    return task, _build_transformer(config, task)


def _build_transformer(config: TrainConfig, task: Task) -> FrozenPretrainedTransformer:
    backbone = load_backbone(config.backbone, init=config.init, seed=config.seed, layers=config.layers)
    torch.manual_seed(config.seed)  # the new input and output layers
    return FrozenPretrainedTransformer(backbone, task.spec, policy=config.policy, pooling=config.pooling,
                                       dropout=config.dropout, attention_dropout=config.attention_dropout,
                                       extra_positions=config.extra_positions,
                                       precision=config.precision, checkpointing=config.checkpointing,
                                       compile=config.compile)


def _build_baseline(config: TrainConfig, task: Task) -> Baseline:
    match = None
    if config.model == "cnn-matched":  # as many parameters as the FPT of this config trains
        match = sum(p.numel() for p in _build_transformer(config, task).parameters() if p.requires_grad)
    torch.manual_seed(config.seed)
    return build_baseline(config.model, task, dropout=config.dropout, match_params=match)


def classification_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@torch.inference_mode()
def evaluate(model: FrozenPretrainedTransformer, task: Task, batch_size: int = 256, split: str | None = None,
             confusion: bool = False) -> dict:
    """Loss and accuracy on a whole evaluation split (every example, no dropped remainder).

    With confusion=True (single-label tasks) also the confusion matrix (rows: true class) and
    per-class accuracy.
    """
    was_training = model.training
    model.eval()
    num_classes = task.spec.num_classes
    matrix = torch.zeros(num_classes, num_classes, dtype=torch.long)
    loss_sum, correct, exact, labels, examples = 0.0, 0, 0, 0, 0
    for batch in task.eval_batches(batch_size, split):
        logits = model(batch.x, batch.mask)
        loss_sum += F.cross_entropy(logits.reshape(-1, num_classes), batch.y.reshape(-1), reduction="sum").item()
        predicted = logits.argmax(-1)
        hits = predicted == batch.y
        correct += hits.sum().item()
        exact += hits.all(dim=1).sum().item()
        labels += batch.y.numel()
        examples += len(batch)
        if confusion:
            matrix += torch.bincount(batch.y.reshape(-1) * num_classes + predicted.reshape(-1),
                                     minlength=num_classes**2).reshape(num_classes, num_classes)
    model.train(was_training)
    result = {"split": split or task.eval_split, "loss": loss_sum / labels, "accuracy": correct / labels,
              "exact_match": exact / examples, "examples": examples}
    if confusion:
        support = matrix.sum(1)
        result["confusion"] = matrix.tolist()
        result["per_class_accuracy"] = [(matrix[c, c] / support[c]).item() if support[c] else None
                                        for c in range(num_classes)]
    return result


class Trainer:
    """Adam on the trainable parameters; evaluates and checkpoints every `eval_every` steps."""

    def __init__(self, model: FrozenPretrainedTransformer, task: Task, config: TrainConfig,
                 run_dir: Path | None = None, progress: bool = True,
                 on_step: Callable[[int, float], None] | None = None):
        self.model, self.task, self.config, self.run_dir = model, task, config, run_dir
        self.progress, self.on_step = progress, on_step
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise FptError("this policy trains no parameter; include at least one group (e.g. output)")
        self.optimizer = torch.optim.Adam(self.params, lr=config.lr)
        self.step = 0
        self.last_checkpoint_step: int | None = None

    def load(self, run_dir: Path) -> None:
        """Continue from the checkpoint in run_dir: parameters, Adam state, step, RNG state."""
        path = run_dir / CHECKPOINT_NAME
        checkpoint = load_checkpoint(path)
        restore(self.model, checkpoint, self.model.backbone_info.weights_hash, path)
        self.optimizer.load_state_dict(checkpoint.optimizer_state)
        torch.set_rng_state(checkpoint.rng_state)
        self.step = self.last_checkpoint_step = checkpoint.step

    def _checkpoint(self) -> None:
        if self.run_dir is not None:
            info = self.model.backbone_info
            save_checkpoint(self.run_dir / CHECKPOINT_NAME, self.model, self.optimizer, self.step,
                            info.name, info.weights_hash)
            self.last_checkpoint_step = self.step

    def train_step(self, batch: Batch) -> tuple[float, float]:
        """One optimiser step over `batch`, accumulated over micro-batches; returns loss, accuracy."""
        self.optimizer.zero_grad(set_to_none=True)
        size = len(batch)
        micro = self.config.micro_batch_size or size
        loss_sum, correct = 0.0, 0
        for start in range(0, size, micro):
            part = batch.slice(start, start + micro)
            logits = self.model(part.x, part.mask)
            loss = classification_loss(logits, part.y)
            (loss * (len(part) / size)).backward()
            loss_sum += loss.item() * len(part)
            correct += (logits.argmax(-1) == part.y).sum().item()
        torch.nn.utils.clip_grad_norm_(self.params, self.config.grad_clip)
        self.optimizer.step()
        return loss_sum / size, correct / batch.y.numel()

    def _diverged(self, loss: float) -> FptError:
        where = (f"the last good checkpoint (step {self.last_checkpoint_step}) is in {self.run_dir}"
                 if self.last_checkpoint_step is not None else "no checkpoint was saved yet")
        return FptError(f"loss became {loss} at step {self.step}; stopped, {where}; try a lower --lr")

    def fit(self) -> dict:
        """Train to config.steps (or the target accuracy); returns the summary."""
        cfg = self.config
        self.model.train()
        started, resumed_from = time.perf_counter(), self.step
        history, reached_at, last_eval = [], None, None
        bar = tqdm(total=cfg.steps, initial=self.step, disable=not self.progress, unit="step",
                   dynamic_ncols=True, desc=f"{cfg.task} on {cfg.backbone}")
        try:
            while self.step < cfg.steps:
                loss, accuracy = self.train_step(self.task.train_batch(self.step, cfg.batch_size, cfg.seed))
                self.step += 1
                if not math.isfinite(loss):
                    raise self._diverged(loss)
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", acc=f"{accuracy:.3f}", refresh=False)
                if self.on_step is not None:
                    self.on_step(self.step, loss)
                if self.step % cfg.eval_every == 0 or self.step == cfg.steps:
                    last_eval = evaluate(self.model, self.task, cfg.eval_batch_size)
                    record = {"step": self.step, "train_loss": loss, **last_eval,
                              "elapsed_s": round(time.perf_counter() - started, 3)}
                    history.append(record)
                    if self.progress:
                        bar.write(f"step {self.step}: {last_eval['split']} accuracy {last_eval['accuracy']:.4f}, "
                                  f"loss {last_eval['loss']:.4f}")
                    if self.run_dir is not None:
                        append_metrics(self.run_dir, record)
                    self._checkpoint()
                    if cfg.target_accuracy is not None and last_eval["accuracy"] >= cfg.target_accuracy:
                        reached_at = self.step
                        break
        finally:
            bar.close()
        if last_eval is None:  # resumed a finished run: nothing trained, still report where it stands
            last_eval = evaluate(self.model, self.task, cfg.eval_batch_size)
        summary = {
            "status": "target_reached" if reached_at else "completed",
            "step": self.step,
            "resumed_from_step": resumed_from,
            "target_accuracy": cfg.target_accuracy,
            "target_reached_at_step": reached_at,
            "final": last_eval,
            "wall_time_s": round(time.perf_counter() - started, 3),
            "trained_params": sum(p.numel() for p in self.params),
            "total_params": sum(p.numel() for p in self.model.parameters()),
            "backbone_hash": self.model.backbone_info.weights_hash,
            "extended_positions": self.model.extended_positions,
            "task_notes": getattr(self.task, "notes", {}),
        }
        if self.run_dir is not None:
            write_json(self.run_dir / "summary.json", summary)
        return summary


def train(config: TrainConfig, out: Path | None = None, progress: bool = True,
          on_step: Callable[[int, float], None] | None = None) -> tuple[dict, Path]:
    """Build everything, make the run directory (only once all inputs proved good), train."""
    config.task_options = task_options(config.task, config.task_options)  # defaults recorded too
    task, model = build(config)
    run_dir = create_run_dir(out or default_run_dir(config.task, config.backbone if config.model == "fpt" else config.model))
    write_json(run_dir / "config.json", dataclasses.asdict(config))
    trainer = Trainer(model, task, config, run_dir, progress, on_step)
    return trainer.fit(), run_dir


def load_run(run_dir: Path) -> tuple[TrainConfig, Task, FrozenPretrainedTransformer, Trainer]:
    """Rebuild a run from its directory and load its checkpoint."""
    run_dir = existing_run_dir(Path(run_dir))
    config = TrainConfig.from_dict(read_json(run_dir / "config.json"))
    task, model = build(config)
    trainer = Trainer(model, task, config, run_dir, progress=False)
    trainer.load(run_dir)
    return config, task, model, trainer


def resume(run_dir: Path, steps: int | None = None, progress: bool = True,
           on_step: Callable[[int, float], None] | None = None) -> tuple[dict, Path]:
    """Continue a run from its last checkpoint, to its configured steps or to `steps`."""
    config, _, _, trainer = load_run(run_dir)
    if steps is not None:
        if steps < 1:
            raise FptError(f"--steps must be at least 1, got {steps}")
        config.steps = steps
        write_json(Path(run_dir) / "config.json", dataclasses.asdict(config))
    truncate_metrics(Path(run_dir), trainer.step)
    trainer.progress, trainer.on_step = progress, on_step
    return trainer.fit(), Path(run_dir)
