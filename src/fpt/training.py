"""Training: build a task and model from a TrainConfig (pure), the loop (micro-batches, clipping,
evaluation on the whole held-out split, checkpoints, resume), evaluation and prediction, and
the entry points `train()`, `resume()` and `load_run()`, which also make the process settings
(fpt.runtime) and own the run directory (fpt.runs)."""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from fpt.backbones import load_backbone
from fpt.backbones.surgery import enable_checkpointing
from fpt.baselines import Baseline, build_baseline
from fpt.checkpoint import load_checkpoint, restore, save_checkpoint
from fpt.config import TrainConfig
from fpt.devices import resolve_device
from fpt.errors import FptError
from fpt.model import FrozenPretrainedTransformer, TrainableModel
from fpt.runs import RunDir
from fpt import runtime
from fpt.tasks import Task, create_task, task_options
from fpt.tasks.base import Batch
from fpt.tasks.bucketing import LengthBucketedTask
from fpt.tracking import Tracker


def build_task(config: TrainConfig) -> Task:
    task = create_task(config.task, **config.task_options)
    return task if config.bucket_window is None else LengthBucketedTask(task, config.bucket_window)


def build(config: TrainConfig) -> tuple[Task, TrainableModel]:
    """Task + model from a config, with the policy applied. Writes nothing, changes no process setting."""
    config.validate()
    task = build_task(config)
    return task, build_model(config, task)


def build_model(config: TrainConfig, task: Task) -> TrainableModel:
    """The model of a config, on its --device (the frozen weights move once; batches each step)."""
    device = resolve_device(config.device)
    model = _build_baseline(config, task) if config.model != "fpt" else _build_transformer(config, task)
    return model.to(device)


def _device_of(model) -> torch.device:
    return next(model.parameters()).device


# With attention dropout, CPU attention cannot use its fused kernels and stores batch x heads x L^2
# probabilities per layer: a step of CIFAR-10 LRA (1024 tokens, batch 16, MiniLM) peaked at 17.3 GB.
# Where that happens, activation checkpointing (exact: dropout masks are replayed) keeps one block's
# attention at a time (4.9 GB measured), and micro-batches keep that block's attention within this
# budget (same gradients in expectation; the dropout masks are drawn per micro-batch).
LONG_INPUT = 512
ATTENTION_BYTES_BUDGET = 2.5e9
_BYTES_PER_ATTENTION_WEIGHT = 12  # probabilities and their gradient in fp32, the dropout mask and a temporary


def plan_memory(config: TrainConfig, spec, heads: int, layers: int = 1, can_checkpoint: bool = True,
                device_type: str = "cpu") -> None:
    """Fill `config.checkpointing` (None: auto) and, with it, an automatic --micro-batch-size.

    Only where attention keeps its probabilities: CUDA's fused kernels apply dropout themselves.
    A body that cannot recompute its blocks (e.g. a ViT) gets micro-batches sized for all layers.
    """
    attention = config.dropout if config.attention_dropout is None else config.attention_dropout
    long_with_dropout = attention > 0 and spec.seq_len >= LONG_INPUT and device_type != "cuda"
    if config.checkpointing is None:
        config.checkpointing = long_with_dropout and can_checkpoint
        if long_with_dropout and config.micro_batch_size is None:
            stored_layers = 1 if config.checkpointing else layers
            per_example = heads * spec.seq_len**2 * _BYTES_PER_ATTENTION_WEIGHT * stored_layers
            fits = max(1, int(ATTENTION_BYTES_BUDGET // per_example))
            config.micro_batch_size = fits if fits < config.batch_size else None


def _build_transformer(config: TrainConfig, task: Task) -> FrozenPretrainedTransformer:
    backbone = load_backbone(config.backbone, init=config.init, seed=config.seed, layers=config.layers,
                             seq_len=task.spec.seq_len, dropout=config.dropout,
                             attention_dropout=config.attention_dropout, compile=config.compile)
    body = backbone.model.config
    plan_memory(config, task.spec, getattr(body, "num_attention_heads", 1), getattr(body, "num_hidden_layers", 1),
                getattr(backbone.model, "supports_gradient_checkpointing", False), resolve_device(config.device).type)
    if config.checkpointing:
        enable_checkpointing(backbone.model)
    torch.manual_seed(config.seed)  # the new input and output layers
    return FrozenPretrainedTransformer(backbone, task.spec, policy=config.policy, pooling=config.pooling,
                                       dropout=config.dropout, extra_positions=config.extra_positions,
                                       precision=config.precision)


def _build_baseline(config: TrainConfig, task: Task) -> Baseline:
    match = None
    if config.model == "cnn-matched":  # as many parameters as the FPT of this config trains
        fpt_model = _build_transformer(dataclasses.replace(config, model="fpt"), task)  # a copy: plan_memory fills it
        match = sum(p.numel() for p in fpt_model.parameters() if p.requires_grad)
    torch.manual_seed(config.seed)
    return build_baseline(config.model, task, dropout=config.dropout, match_params=match)


def _build_for_process(config: TrainConfig) -> tuple[Task, TrainableModel]:
    """build(), after the process settings a run needs (threads, subnormals, heap threshold)."""
    config.validate()
    runtime.configure_process(config.threads, config.precision)  # before the task: threads read its files
    task = build_task(config)
    if task.variable_length:
        runtime.limit_heap_fragmentation()
    return task, build_model(config, task)


# Tokens in one evaluation batch at most: 256 CIFAR-10 LRA images of 1024 tokens took 6.4 GB in one
# batch; results do not depend on how examples are batched, so long tasks use smaller batches.
EVAL_TOKEN_BUDGET = 32_768


def eval_batch_for(task: Task, batch_size: int) -> int:
    """The evaluation batch size for this task: `batch_size`, less where sequences are long."""
    return max(1, min(batch_size, EVAL_TOKEN_BUDGET // task.spec.seq_len))


def _is_out_of_memory(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, MemoryError) or "can't allocate memory" in text or "out of memory" in text


def classification_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@torch.inference_mode()
def evaluate(model: TrainableModel, task: Task, batch_size: int = 256, split: str | None = None,
             confusion: bool = False) -> dict:
    """Loss and accuracy on a whole evaluation split (every example, no dropped remainder).

    With confusion=True (single-label tasks) also the confusion matrix (rows: true class) and
    per-class accuracy. Long sequences are evaluated in smaller batches (`eval_batch_for`).
    """
    batch_size = eval_batch_for(task, batch_size)
    was_training = model.training
    model.eval()
    num_classes = task.spec.num_classes
    device = _device_of(model)
    matrix = torch.zeros(num_classes, num_classes, dtype=torch.long, device=device)
    loss_sum, correct, exact, labels, examples = 0.0, 0, 0, 0, 0
    for batch in task.eval_batches(batch_size, split):
        batch = batch.to(device)
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
        result["confusion"] = matrix.cpu().tolist()
        result["per_class_accuracy"] = [(matrix[c, c] / support[c]).item() if support[c] else None
                                        for c in range(num_classes)]
    return result


class Trainer:
    """Adam on the trainable parameters; evaluates and checkpoints every `eval_every` steps."""

    def __init__(self, model: TrainableModel, task: Task, config: TrainConfig,
                 run_dir: Path | RunDir | None = None, progress: bool = True,
                 on_step: Callable[[int, float], None] | None = None, tracker: Tracker | None = None):
        self.model, self.task, self.config = model, task, config
        self.run_dir = run_dir if isinstance(run_dir, RunDir) or run_dir is None else RunDir(run_dir)
        self.progress, self.on_step = progress, on_step
        self.tracker = tracker  # MLflow, TensorBoard, W&B (fpt.tracking); needs a run directory
        if tracker is not None and self.run_dir is None:
            raise FptError("experiment tracking mirrors a run directory; give the Trainer a run_dir")
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise FptError("this policy trains no parameter; include at least one group (e.g. output)")
        self.optimizer = torch.optim.Adam(self.params, lr=config.lr)
        self.device = _device_of(model)
        self.step = 0
        self.last_checkpoint_step: int | None = None

    def load(self, run_dir: Path, fresh_ok: bool = False) -> None:
        """Continue from the checkpoint in run_dir: parameters, Adam state, step, RNG state. With
        `fresh_ok` (resuming), a run killed before its first checkpoint starts again at step 0,
        exactly as it first did: the model was just built from the same config and seed."""
        run = RunDir(run_dir)
        if fresh_ok and not run.has_checkpoint:  # evaluations recorded after step 0 are dropped by resume
            return
        checkpoint = load_checkpoint(run.checkpoint_path)
        restore(self.model, checkpoint, run.checkpoint_path)
        try:
            self.optimizer.load_state_dict(checkpoint.optimizer_state)
            torch.set_rng_state(checkpoint.rng_state)
            if checkpoint.cuda_rng_state is not None and self.device.type == "cuda":
                torch.cuda.set_rng_state(checkpoint.cuda_rng_state, self.device)
        except (ValueError, KeyError, RuntimeError) as exc:
            raise FptError(f"checkpoint {run.checkpoint_path} does not fit this run's optimizer ({str(exc)[:80]}); "
                           "was it copied from another run?") from None
        self.step = self.last_checkpoint_step = checkpoint.step

    def _checkpoint(self) -> None:
        """Save the trained state, only while every trained tensor is finite (a diverged state is
        never kept as the 'last good' one); a failed write keeps the previous checkpoint."""
        if self.run_dir is None:
            return
        if not all(torch.isfinite(p).all() for p in self.params):
            raise self._diverged("trained weights became NaN or infinite")
        try:
            save_checkpoint(self.run_dir.checkpoint_path, self.model, self.optimizer, self.step)
        except OSError as exc:
            kept = (f"the checkpoint of step {self.last_checkpoint_step} is kept" if self.last_checkpoint_step is not None
                    else "no checkpoint was saved yet")
            raise FptError(f"cannot write {self.run_dir.checkpoint_path} ({exc.strerror or exc}); {kept}; "
                           "free some space and resume") from None
        self.last_checkpoint_step = self.step

    def train_step(self, batch: Batch) -> tuple[float, float]:
        """One optimiser step over `batch`, accumulated over micro-batches; returns loss, accuracy."""
        batch = batch.to(self.device)
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

    def _diverged(self, what: str) -> FptError:
        where = (f"the last good checkpoint (step {self.last_checkpoint_step}) is in {self.run_dir}"
                 if self.last_checkpoint_step is not None else "no checkpoint was saved yet")
        return FptError(f"{what} at step {self.step}; stopped, {where}; try a lower --lr")

    def _failed(self, exc: BaseException, doing: str) -> FptError:
        """An exception inside a step or an evaluation: out of memory, or a divergence."""
        if _is_out_of_memory(exc):
            size = "--eval-batch-size" if doing == "evaluating" else "--batch-size (or --micro-batch-size, --checkpointing)"
            return FptError(f"out of memory while {doing} at step {self.step}; lower {size}")
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        return self._diverged(f"{doing} failed ({type(exc).__name__}: {first_line})")

    def _evaluate(self) -> dict:
        try:
            return evaluate(self.model, self.task, self.config.eval_batch_size)
        except (RuntimeError, ValueError, MemoryError) as exc:
            raise self._failed(exc, "evaluating") from None

    def fit(self) -> dict:
        """Train to config.steps (or the target accuracy); returns the summary."""
        cfg = self.config
        self.model.train()
        started, resumed_from = time.perf_counter(), self.step
        history, reached_at, last_eval = [], None, None
        if self.tracker is not None:  # a new tracked run, or the same one continued and caught up
            self.tracker.open(self.run_dir.path, dataclasses.asdict(cfg), self.run_dir.read_metrics())
        bar = tqdm(total=cfg.steps, initial=self.step, disable=not self.progress, unit="step",
                   dynamic_ncols=True, desc=f"{self.task.name} on {self.model.weights_name}")
        try:
            while self.step < cfg.steps:
                batch = self.task.train_batch(self.step, cfg.batch_size, cfg.seed)
                try:
                    loss, accuracy = self.train_step(batch)
                except (RuntimeError, ValueError, MemoryError) as exc:
                    raise self._failed(exc, "training") from None
                self.step += 1
                if not math.isfinite(loss):
                    raise self._diverged(f"loss became {loss}")
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", acc=f"{accuracy:.3f}", refresh=False)
                if self.on_step is not None:
                    self.on_step(self.step, loss)
                if self.step % cfg.eval_every == 0 or self.step == cfg.steps:
                    last_eval = self._evaluate()
                    if not math.isfinite(last_eval["loss"]):
                        raise self._diverged(f"held-out loss became {last_eval['loss']}")
                    record = {"step": self.step, "train_loss": loss, **last_eval,
                              "elapsed_s": round(time.perf_counter() - started, 3)}
                    history.append(record)
                    if self.progress:
                        bar.write(f"step {self.step}: {last_eval['split']} accuracy {last_eval['accuracy']:.4f}, "
                                  f"loss {last_eval['loss']:.4f}")
                    if self.run_dir is not None:
                        self.run_dir.append_metrics(record)
                    self._checkpoint()
                    if self.tracker is not None:  # after the checkpoint: a resume never makes this evaluation again
                        self.tracker.log_evaluation(self.step, record)
                    if cfg.target_accuracy is not None and last_eval["accuracy"] >= cfg.target_accuracy:
                        reached_at = self.step
                        break
        finally:
            bar.close()
        if last_eval is None:  # resumed a finished run: nothing trained, still report where it stands
            last_eval = self._evaluate()
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
            "backbone_hash": self.model.weights_hash,
            "extended_positions": self.model.extended_positions,
            "task_notes": getattr(self.task, "notes", {}),
        }
        if self.run_dir is not None:
            self.run_dir.write_summary(summary)
        if self.tracker is not None:
            self.tracker.finish(summary, self.run_dir.artifacts())
        return summary


def train(config: TrainConfig, out: Path | None = None, progress: bool = True,
          on_step: Callable[[int, float], None] | None = None, tracker: Tracker | None = None) -> tuple[dict, Path]:
    """Build everything, make the run directory (only once all inputs proved good), train.

    A run that fails before its first checkpoint leaves no directory behind; one interrupted
    (Ctrl-C, kill) keeps it and resumes, from step 0 if it saved nothing yet.
    """
    config.task_options = task_options(config.task, config.task_options)  # defaults recorded too
    label = config.backbone if config.model == "fpt" else config.model
    path = Path(out or RunDir.default_path(config.task, label))
    RunDir.check_creatable(path)  # before the backbone is loaded
    task, model = _build_for_process(config)
    config.device = str(_device_of(model))  # what ran, so a resume stays there unless told otherwise
    run_dir = RunDir.create(path)
    trainer = None
    try:
        run_dir.write_config(dataclasses.asdict(config))
        trainer = Trainer(model, task, config, run_dir, progress, on_step, tracker)
        return trainer.fit(), run_dir.path
    except Exception:
        if trainer is None or trainer.last_checkpoint_step is None:
            run_dir.remove()
        raise
    finally:
        if tracker is not None:
            tracker.close()
        run_dir.unlock()


class LoadedRun(NamedTuple):
    """A run rebuilt from its directory; unpacks as (config, task, model, trainer)."""

    config: TrainConfig
    task: Task
    model: TrainableModel
    trainer: Trainer

    def predict(self, x, mask=None, batch_size: int = 256) -> torch.Tensor:
        """Class probabilities (N, outputs, classes) for rows `x` in the task's stored form (images
        uint8 (N, H, W[, C]), token ids (N, L) with an optional mask, or the bit tasks' inputs)."""
        import numpy as np

        from fpt.prediction import check_rows, predict_probabilities, to_batches

        x, mask = np.asarray(x), None if mask is None else np.asarray(mask)
        check_rows(x, mask, None, self.task, "predict")
        return predict_probabilities(self.model, to_batches(self.task, x, mask, eval_batch_for(self.task, batch_size)))


def load_run(run_dir: Path, lock: bool = False, device: str | None = None) -> LoadedRun:
    """Rebuild a run from its directory and load its checkpoint (`lock`: to write to it, see
    RunDir.lock; `device`: another device than the run's own, e.g. a GPU run continued on a CPU)."""
    run = RunDir.existing(run_dir)
    if lock:
        run.lock()
    try:
        config = TrainConfig.from_dict(run.read_config(), where=str(run.config_path))
        if device is not None:
            config.device = device
        task, model = _build_for_process(config)
        trainer = Trainer(model, task, config, run, progress=False)
        trainer.load(run.path, fresh_ok=lock)
    except BaseException:
        run.unlock()
        raise
    return LoadedRun(config, task, model, trainer)


def resume(run_dir: Path, steps: int | None = None, progress: bool = True,
           on_step: Callable[[int, float], None] | None = None, device: str | None = None,
           tracker: Tracker | None = None) -> tuple[dict, Path]:
    """Continue a run from its last checkpoint, to its configured steps or to `steps`."""
    if steps is not None and steps < 1:
        raise FptError(f"--steps must be at least 1, got {steps}")
    config, _, _, trainer = load_run(run_dir, lock=True, device=device)
    try:
        if steps is not None:
            config.steps = steps
            trainer.run_dir.write_config(dataclasses.asdict(config))
        trainer.run_dir.truncate_metrics(trainer.step)
        trainer.progress, trainer.on_step, trainer.tracker = progress, on_step, tracker
        return trainer.fit(), Path(run_dir)
    finally:
        if tracker is not None:
            tracker.close()
        trainer.run_dir.unlock()


@torch.inference_mode()
def predict(model: TrainableModel, task: Task, batch_size: int = 256, split: str | None = None) -> torch.Tensor:
    """Logits (N, num_outputs, num_classes) for every example of a split, in the split's order."""
    was_training = model.training
    model.eval()
    try:
        batch_size = eval_batch_for(task, batch_size)
        device = _device_of(model)

        def run(batch: Batch) -> torch.Tensor:
            batch = batch.to(device)
            return model(batch.x, batch.mask).cpu()

        if isinstance(task, LengthBucketedTask):  # batches come sorted by length: put them back in order
            pieces = [(index, run(batch)) for index, batch in task.indexed_eval_batches(batch_size, split)]
            total = sum(len(index) for index, _ in pieces)
            out = torch.empty(total, *pieces[0][1].shape[1:], dtype=pieces[0][1].dtype)
            for index, logits in pieces:
                out[index] = logits
            return out
        return torch.cat([run(batch) for batch in task.eval_batches(batch_size, split)])
    finally:
        model.train(was_training)
