"""Training: build a task and model from a TrainConfig (pure), the loop (micro-batches, clipping,
evaluation on the whole held-out split, checkpoints, resume), evaluation and prediction, and
the entry points `train()`, `resume()` and `load_run()`, which also make the process settings
(fpt.runtime) and own the run directory (fpt.runs)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from fpt import distributed, runtime
from fpt.backbones import load_backbone
from fpt.backbones.surgery import enable_checkpointing
from fpt.baselines import Baseline, build_baseline
from fpt.checkpoint import Checkpoint, RngState, load_checkpoint, restore, save_checkpoint
from fpt.config import TrainConfig
from fpt.devices import resolve_device
from fpt.distributed import SINGLE, World
from fpt.errors import FptError, StopRequested
from fpt.model import FrozenPretrainedTransformer, TrainableModel, default_pooling
from fpt.runs import RunDir, is_subset
from fpt.scores import describe, reached
from fpt.tasks import Task, create_task, task_options
from fpt.tasks.base import Batch
from fpt.tasks.bucketing import LengthBucketedTask
from fpt.tracking import Tracker


def build_task(config: TrainConfig) -> Task:
    task = create_task(config.task, **config.task_options)
    check_target(config, task)
    if config.train_fraction is not None:  # before bucketing: the share is of the split as stored
        task.keep_training_share(config.train_fraction)
    return task if config.bucket_window is None else LengthBucketedTask(task, config.bucket_window)


def check_target(config: TrainConfig, task: Task) -> None:
    """A stopping target of the task's own kind: the other one would never be met, silently."""
    if task.spec.regression and config.target_accuracy is not None:
        raise FptError(f"--target-accuracy is for classifiers; {config.task} is a forecast: stop it with --target-mse")
    if not task.spec.regression and config.target_mse is not None:
        raise FptError(f"--target-mse is for forecasts; {config.task} is a classifier: stop it with --target-accuracy")


def build(config: TrainConfig) -> tuple[Task, TrainableModel]:
    """Task + model from a config, with the policy applied. Writes nothing, changes no process setting."""
    config.validate()
    task = build_task(config)
    return task, build_model(config, task)


def build_model(config: TrainConfig, task: Task) -> TrainableModel:
    """The model of a config, on its --device (the frozen weights move once; batches each step)."""
    device = resolve_device(config.device)
    if config.precision == "fp16" and device.type != "cuda":
        raise FptError(f"--precision fp16 (with a loss scaler) is for CUDA GPUs; on {device.type} use bf16 or fp32")
    model = _build_baseline(config, task) if config.model != "fpt" else _build_transformer(config, task)
    return model.to(device)


def _device_of(model) -> torch.device:
    parameter = next(model.parameters(), None)  # None: a model without parameters (NaiveForecast) runs on the CPU
    return torch.device("cpu") if parameter is None else parameter.device


# With attention dropout, CPU attention cannot use its fused kernels and stores batch x heads x L^2
# probabilities per layer: a step of CIFAR-10 LRA (1024 tokens, batch 16, MiniLM) peaked at 17.3 GB.
# Where that happens, activation checkpointing (exact: dropout masks are replayed) keeps one block's
# attention at a time (4.9 GB measured), and micro-batches keep that block's attention within this
# budget (same gradients in expectation; the dropout masks are drawn per micro-batch).
LONG_INPUT = 512
ATTENTION_BYTES_BUDGET = 2.5e9
_BYTES_PER_ATTENTION_WEIGHT = 12  # probabilities and their gradient in fp32, the dropout mask and a temporary


def plan_memory(
    config: TrainConfig, spec, heads: int, layers: int = 1, can_checkpoint: bool = True, device_type: str = "cpu"
) -> None:
    """Fill `config.checkpointing` (None: auto) and, with it, an automatic --micro-batch-size.

    Only where attention keeps its probabilities: CUDA's fused kernels apply dropout themselves.
    A body that cannot recompute its blocks (e.g. a ViT) gets micro-batches sized for all layers.
    """
    attention = config.dropout if config.attention_dropout is None else config.attention_dropout
    long_with_dropout = attention > 0 and spec.seq_len >= LONG_INPUT and device_type != "cuda"
    if config.checkpointing is None:
        config.checkpointing = long_with_dropout and can_checkpoint
        if long_with_dropout and config.micro_batch_size is None and layers:  # --body none: no attention
            stored_layers = 1 if config.checkpointing else layers
            per_example = heads * spec.seq_len**2 * _BYTES_PER_ATTENTION_WEIGHT * stored_layers
            fits = max(1, int(ATTENTION_BYTES_BUDGET // per_example))
            config.micro_batch_size = fits if fits < config.batch_size else None


def _build_transformer(config: TrainConfig, task: Task) -> FrozenPretrainedTransformer:
    backbone = load_backbone(
        config.backbone,
        init=config.init,
        seed=config.seed,
        layers=config.layers,
        seq_len=task.spec.seq_len,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        attention=config.attention,
        compile=config.compile,
        body=config.body,
    )
    body = backbone.model.config
    plan_memory(
        config,
        task.spec,
        getattr(body, "num_attention_heads", 1),
        getattr(body, "num_hidden_layers", 1),
        getattr(backbone.model, "supports_gradient_checkpointing", False),
        resolve_device(config.device).type,
    )
    if config.checkpointing:
        enable_checkpointing(backbone.model)
    torch.manual_seed(config.seed)  # the new input and output layers
    config.pooling = config.pooling or default_pooling(task.spec)  # recorded in config.json as it ran
    if config.body != "backbone":
        config.policy = "full"  # a control trains every parameter it has; recorded as it ran
    return FrozenPretrainedTransformer(
        backbone,
        task.spec,
        policy=config.policy,
        pooling=config.pooling,
        dropout=config.dropout,
        extra_positions=config.extra_positions,
        precision=config.precision,
    )


def _build_baseline(config: TrainConfig, task: Task) -> Baseline:
    match = None
    if config.model == "cnn-matched":  # as many parameters as the FPT of this config trains
        fpt_model = _build_transformer(dataclasses.replace(config, model="fpt"), task)  # a copy: plan_memory fills it
        match = sum(p.numel() for p in fpt_model.parameters() if p.requires_grad)
    torch.manual_seed(config.seed)
    return build_baseline(config.model, task, dropout=config.dropout, match_params=match)


def _build_for_process(config: TrainConfig, world: World = SINGLE) -> tuple[Task, TrainableModel]:
    """build(), after the process settings a run needs (threads, subnormals, heap threshold)."""
    config.validate(world.size)
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


def learning_rate(config: TrainConfig, step: int) -> float:
    """The rate of optimiser step `step` (0-based): linear warm-up, then constant or a cosine decay
    to 0 at config.steps. A function of the step alone, so a resumed run needs no scheduler state
    (torch's schedulers keep a counter that would have to be checkpointed besides)."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    if config.lr_schedule == "cosine":
        progress = min(1.0, (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps))
        return config.lr * 0.5 * (1.0 + math.cos(math.pi * progress))
    return config.lr


def task_loss(outputs: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over labels, or the mean squared error of a regression task's values (float y)."""
    if torch.is_floating_point(y):
        return F.mse_loss(outputs.reshape(y.shape), y)
    return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), y.reshape(-1))


def _first_examples(task: Task, batch_size: int, split: str | None, limit: int, cut: list[bool]) -> Iterator[Batch]:
    """The split's first `limit` examples, in batches; appends True to `cut` if the split is longer.
    A length-bucketed task batches its split shortest first: its first examples are picked by
    their place in the split, not by length (the shortest would be the easiest)."""
    if isinstance(task, LengthBucketedTask):
        data = task.inner.eval_split_data(split)
        order = task.eval_order(split)
        cut.extend([len(order) > limit])
        for index in order[order < limit].split(batch_size):
            yield task.inner.make_batch(data, index, None)
        return
    taken = 0
    for batch in task.eval_batches(batch_size, split):
        if taken + len(batch) > limit:
            cut.append(True)
            if taken < limit:
                yield batch.slice(0, limit - taken)
            return
        taken += len(batch)
        yield batch


@torch.inference_mode()
def evaluate(
    model: TrainableModel,
    task: Task,
    batch_size: int = 256,
    split: str | None = None,
    confusion: bool = False,
    world: World = SINGLE,
    limit: int | None = None,
) -> dict:
    """Loss and accuracy on a whole evaluation split (every example, no dropped remainder).

    With confusion=True (single-label tasks) also the confusion matrix (rows: true class) and
    per-class accuracy. Long sequences are evaluated in smaller batches (`eval_batch_for`).
    Ranks of a distributed run score every world.size-th batch each and sum the counts, so the
    split is scored exactly once and every rank gets the same result. `limit`: only the split's
    first N examples (a fixed subset, named "split[:N]" in the result).
    """
    batch_size = eval_batch_for(task, batch_size)
    cut: list[bool] = []  # filled as the batches are drawn: name the split after the loop
    batches = (
        task.eval_batches(batch_size, split) if limit is None else _first_examples(task, batch_size, split, limit, cut)
    )

    def split_name() -> str:
        return (split or task.eval_split) + (f"[:{limit}]" if cut else "")

    if task.spec.regression:
        errors = _evaluate_values(model, batches, world)
        return {"split": split_name(), **errors}
    was_training = model.training
    model.eval()
    num_classes = task.spec.num_classes
    device = _device_of(model)
    matrix = torch.zeros(num_classes, num_classes, dtype=torch.long, device=device)
    label_counts = torch.zeros(num_classes, dtype=torch.long, device=device)
    loss_sum, correct, exact, labels, examples = 0.0, 0, 0, 0, 0
    for index, batch in enumerate(batches):
        if index % world.size != world.rank:
            continue
        batch = batch.to(device)
        logits = model(batch.x, batch.mask)
        loss_sum += F.cross_entropy(logits.reshape(-1, num_classes), batch.y.reshape(-1), reduction="sum").item()
        predicted = logits.argmax(-1)
        hits = predicted == batch.y
        correct += hits.sum().item()
        exact += hits.all(dim=1).sum().item()
        labels += batch.y.numel()
        examples += len(batch)
        label_counts += torch.bincount(batch.y.reshape(-1), minlength=num_classes)
        if confusion:
            matrix += torch.bincount(
                batch.y.reshape(-1) * num_classes + predicted.reshape(-1), minlength=num_classes**2
            ).reshape(num_classes, num_classes)
    model.train(was_training)
    if world.distributed:
        counts = world.all_reduce_sum(
            torch.tensor([loss_sum, correct, exact, labels, examples], dtype=torch.float64, device=device)
        ).tolist()
        loss_sum, (correct, exact, labels, examples) = counts[0], map(round, counts[1:])
        matrix = world.all_reduce_sum(matrix)
        label_counts = world.all_reduce_sum(label_counts)
    # majority_share: the accuracy of always answering the split's most frequent label, the
    # chance level Table 6 tells a flat run from a converged one by (fpt.experiments.convergence)
    result = {
        "split": split_name(),
        "loss": loss_sum / labels,
        "accuracy": correct / labels,
        "exact_match": exact / examples,
        "examples": examples,
        "majority_share": label_counts.max().item() / labels,
    }
    if confusion:
        support = matrix.sum(1)
        result["confusion"] = matrix.cpu().tolist()
        result["per_class_accuracy"] = [
            (matrix[c, c] / support[c]).item() if support[c] else None for c in range(num_classes)
        ]
    return result


def _evaluate_values(model: TrainableModel, batches: Iterator[Batch], world: World) -> dict:
    """A regression task's split: mean squared and absolute error over every predicted value of
    every example (a forecast's every step of every window; no batch dropped). The loss is the MSE."""
    was_training = model.training
    model.eval()
    device = _device_of(model)
    squared, absolute, values, examples = 0.0, 0.0, 0, 0
    for index, batch in enumerate(batches):
        if index % world.size != world.rank:
            continue
        batch = batch.to(device)
        error = model(batch.x, batch.mask).reshape(batch.y.shape).double() - batch.y.double()
        squared += error.square().sum().item()
        absolute += error.abs().sum().item()
        values += batch.y.numel()
        examples += len(batch)
    model.train(was_training)
    if world.distributed:
        totals = world.all_reduce_sum(
            torch.tensor([squared, absolute, values, examples], dtype=torch.float64, device=device)
        ).tolist()
        squared, absolute, values, examples = totals[0], totals[1], round(totals[2]), round(totals[3])
    mse = squared / values
    return {"loss": mse, "mse": mse, "mae": absolute / values, "examples": examples}


class Trainer:
    """Adam on the trainable parameters; evaluates and checkpoints every `eval_every` steps.

    In a distributed run (`world`), every rank draws the same global batch and trains its slice
    of it under DistributedDataParallel, so N ranks compute what one process computes; only the
    rank-0 trainer has a `run_dir` (the others pass None) and shows progress.
    """

    def __init__(
        self,
        model: TrainableModel,
        task: Task,
        config: TrainConfig,
        run_dir: Path | RunDir | None = None,
        progress: bool = True,
        on_step: Callable[[int, float], None] | None = None,
        world: World = SINGLE,
        tracker: Tracker | None = None,
    ):
        config.validate(world.size)  # from Python too: eval_every 0 or lr -1 fail here, in one line
        self.model, self.task, self.config, self.world = model, task, config, world
        self.run_dir = run_dir if isinstance(run_dir, RunDir) or run_dir is None else RunDir(run_dir)
        self.progress, self.on_step = progress and world.is_main, on_step
        self.tracker = tracker  # MLflow, TensorBoard, W&B (fpt.tracking); needs a run directory
        if tracker is not None and self.run_dir is None:
            raise FptError("experiment tracking mirrors a run directory; give the Trainer a run_dir")
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise FptError("this policy trains no parameter; include at least one group (e.g. output)")
        self.optimizer = torch.optim.Adam(self.params, lr=config.lr)
        self.device = _device_of(model)
        # fp16 needs its loss scaled so small gradients do not flush to zero (bf16 has fp32's range)
        self.scaler = torch.amp.GradScaler(self.device.type) if config.precision == "fp16" else None
        self.forward = distributed.wrap(model, world)
        if world.distributed:  # ranks drop different units; a checkpoint restores each rank's state
            torch.manual_seed(distributed.rank_seed(config.seed, world.rank))
        self.step = 0
        self.last_checkpoint_step: int | None = None
        # seconds of training before this process resumed the run (elapsed_s counts from step 0);
        # None after loading a checkpoint too old to hold it (resume takes it from the metrics)
        self.elapsed_before: float | None = 0.0
        self.started: float | None = None  # when this process's fit() began
        self.stop_signal: int | None = None  # Ctrl-C or SIGTERM received: stop after this step
        self.stop_agreed = False  # every rank saw the request by the end of the last step

    def load(self, checkpoint: Checkpoint, path: Path, resuming: bool = False) -> None:
        """Continue from `checkpoint` (read from `path`): parameters, Adam state, step, this rank's
        RNG state. `resuming` (training on) needs the world size the checkpoint was saved with."""
        if resuming:
            checkpoint.check_world_size(self.world.size, path)
        restore(self.model, checkpoint, path)
        try:
            self.optimizer.load_state_dict(checkpoint.optimizer_state)
            checkpoint.rng_states[min(self.world.rank, checkpoint.world_size - 1)].restore(self.device)
            if self.scaler is not None and checkpoint.grad_scaler is not None:
                self.scaler.load_state_dict(checkpoint.grad_scaler)
        except (ValueError, KeyError, RuntimeError) as exc:
            raise FptError(
                f"checkpoint {path} does not fit this run's optimizer ({str(exc)[:80]}); "
                "was it copied from another run?"
            ) from None
        self.step = self.last_checkpoint_step = checkpoint.step
        self.elapsed_before = checkpoint.elapsed_s

    def elapsed(self) -> float:
        """Training seconds from step 0 to now, across resumes."""
        now = 0.0 if self.started is None else time.perf_counter() - self.started
        return (self.elapsed_before or 0.0) + now

    def _checkpoint(self) -> None:
        """Save the trained state, only while every trained tensor is finite (a diverged state is
        never kept as the 'last good' one); a failed write keeps the previous checkpoint."""
        rng_states = self.world.all_gather(RngState.here(self.device))  # every rank takes part
        if not all(torch.isfinite(p).all() for p in self.params):
            raise self._diverged("trained weights became NaN or infinite")
        if self.run_dir is None:  # another rank than 0: rank 0 writes it
            self.last_checkpoint_step = self.step
            return
        try:
            save_checkpoint(
                self.run_dir.checkpoint_path,
                self.model,
                self.optimizer,
                self.step,
                rng_states,
                self.scaler.state_dict() if self.scaler is not None else None,
                round(self.elapsed(), 3),
            )
        except OSError as exc:
            kept = (
                f"the checkpoint of step {self.last_checkpoint_step} is kept"
                if self.last_checkpoint_step is not None
                else "no checkpoint was saved yet"
            )
            raise FptError(
                f"cannot write {self.run_dir.checkpoint_path} ({exc.strerror or exc}); {kept}; "
                "free some space and resume"
            ) from None
        self.last_checkpoint_step = self.step

    def train_step(self, batch: Batch) -> tuple[float, float]:
        """One optimiser step over `batch` (this rank's slice of it), accumulated over
        micro-batches; returns the loss and accuracy (None for a regression task) over the whole
        batch, the same on every rank."""
        share = len(batch) // self.world.size
        batch = batch.slice(self.world.rank * share, (self.world.rank + 1) * share).to(self.device)
        self.optimizer.zero_grad(set_to_none=True)
        size = len(batch)
        micro = self.config.micro_batch_size or size
        loss_sum, correct = 0.0, 0
        for start in range(0, size, micro):
            part = batch.slice(start, start + micro)
            last = start + micro >= size
            # DDP all-reduces gradients once per step, after the last micro-batch
            syncing = contextlib.nullcontext() if last or not self.world.distributed else self.forward.no_sync()
            with syncing:
                logits = self.forward(part.x, part.mask)
                loss = task_loss(logits, part.y)
                scaled = loss * (len(part) / size)
                (scaled if self.scaler is None else self.scaler.scale(scaled)).backward()
            loss_sum += loss.item() * len(part)
            if not self.task.spec.regression:
                correct += (logits.argmax(-1) == part.y).sum().item()
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.config, self.step)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients
        torch.nn.utils.clip_grad_norm_(self.params, self.config.grad_clip)
        if self.scaler is None:
            self.optimizer.step()
        else:
            self.scaler.step(self.optimizer)  # skipped where the scaled gradients overflowed
            self.scaler.update()
        # the last count votes to stop: ranks signalled at different moments all stop after the same step
        counts = [loss_sum, correct, size, batch.y.numel(), float(self.stop_signal is not None)]
        if self.world.distributed:  # one small all-reduce: every rank sees the same loss and stops alike
            counts = self.world.all_reduce_sum(torch.tensor(counts, dtype=torch.float64, device=self.device)).tolist()
        self.stop_agreed = counts[4] > 0
        return counts[0] / counts[2], None if self.task.spec.regression else counts[1] / counts[3]

    def _diverged(self, what: str) -> FptError:
        where = (
            f"the last good checkpoint (step {self.last_checkpoint_step}) is in {self.run_dir}"
            if self.last_checkpoint_step is not None
            else "no checkpoint was saved yet"
        )
        return FptError(f"{what} at step {self.step}; stopped, {where}; try a lower --lr")

    def _failed(self, exc: BaseException, doing: str) -> FptError:
        """An exception inside a step or an evaluation: out of memory, a peer rank gone, or a divergence."""
        if self.world.distributed and distributed.is_peer_failure(exc):
            return FptError(
                f"another rank stopped while {doing} at step {self.step}; its own error says why "
                "(rank 0's is printed first)"
            )
        if _is_out_of_memory(exc):
            size = (
                "--eval-batch-size"
                if doing == "evaluating"
                else "--batch-size (or --micro-batch-size, --checkpointing)"
            )
            return FptError(f"out of memory while {doing} at step {self.step}; lower {size}")
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        return self._diverged(f"{doing} failed ({type(exc).__name__}: {first_line})")

    def _evaluate(self, whole: bool = True, split: str | None = None) -> dict:
        """The held-out split (or `split`), or its first --eval-subset examples (`whole` False, in between)."""
        try:
            return evaluate(
                self.model,
                self.task,
                self.config.eval_batch_size,
                split=split,
                world=self.world,
                limit=None if whole else self.config.eval_subset,
            )
        except (RuntimeError, ValueError, MemoryError) as exc:
            raise self._failed(exc, "evaluating") from None

    def _score_test_splits(self) -> dict[str, dict]:
        """Each test split, scored once when the run ends, where training watched another split:
        every choice made while training (the target, the step to stop at) saw the validation
        split alone, so the test score is not selected on."""
        return {split: self._evaluate(split=split) for split in self.task.test_splits if split != self.task.eval_split}

    def _evaluation_step(self, train_loss: float, bar) -> dict:
        """Evaluate (the --eval-subset in between, the whole split at the end and to confirm a
        target the subset reached), then write the records and checkpoint, once: a run killed
        before the checkpoint makes the same evaluations again when resumed. Returns the last."""
        cfg = self.config
        results = [self._evaluate(whole=self.step == cfg.steps or cfg.eval_subset is None)]
        if reached(results[0], cfg.target_accuracy, cfg.target_mse) and is_subset(results[0]):
            results.append(self._evaluate(whole=True))  # the target counts on the whole split
        records = []
        for result in results:
            if not math.isfinite(result["loss"]):
                raise self._diverged(f"held-out loss became {result['loss']}")
            records.append(
                {"step": self.step, "train_loss": train_loss, **result, "elapsed_s": round(self.elapsed(), 3)}
            )
            if self.progress:
                bar.write(f"step {self.step}: {result['split']} {describe(result)}, loss {result['loss']:.4f}")
        if self.run_dir is not None:
            for record in records:
                self.run_dir.append_metrics(record)
        self._checkpoint()
        if self.tracker is not None:  # after the checkpoint: a resume never makes these evaluations again
            for record in records:
                self.tracker.log_evaluation(self.step, record)
        return results[-1]

    def _open_tracker(self) -> None:
        """A new tracked run, or the same one continued and caught up with metrics.jsonl."""
        if self.tracker is not None:
            self.tracker.open(self.run_dir.path, dataclasses.asdict(self.config), self.run_dir.read_metrics())

    @contextlib.contextmanager
    def _stop_on_request(self):
        """Ctrl-C or SIGTERM (a scheduler's preemption, `kill`, the end of a sitting) lets the step
        under way finish, then saves a checkpoint and stops, so a resume loses nothing; a second
        one stops at once. Signals reach only the main thread: elsewhere (a Ray worker) they keep
        their own handling."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def request(signum, frame):
            if self.stop_signal is not None:
                raise KeyboardInterrupt  # asked twice: stop now, from the last checkpoint
            self.stop_signal = signum
            if self.world.is_main:
                tqdm.write(
                    f"fpt: {signal.Signals(signum).name}: stopping once the step under way is done, with a "
                    "checkpoint (send it again to stop at once)",
                    file=sys.stderr,
                )

        previous = {number: signal.signal(number, request) for number in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def _stop_requested(self) -> bool:
        """One process stops at once; ranks stop as the last step's all-reduce agreed (train_step)."""
        return self.stop_agreed if self.world.distributed else self.stop_signal is not None

    def _stop(self) -> StopRequested:
        """Save where the run stands (unless the evaluation just did) and say how to go on."""
        if self.last_checkpoint_step != self.step:
            self._checkpoint()
        signum = self.stop_signal or signal.SIGTERM  # a rank that got no signal stops with the others
        where = f"`fpt train --resume {self.run_dir.path}`" if self.run_dir is not None else "`fpt train --resume`"
        return StopRequested(
            f"stopped at step {self.step} of {self.config.steps} on {signal.Signals(signum).name}, "
            f"checkpoint saved; continue with {where}",
            signum,
        )

    def fit(self) -> dict:
        """Train to config.steps (or the target accuracy or MSE); returns the summary. Stopped on request
        (see _stop_on_request), it saves a checkpoint and raises StopRequested."""
        cfg = self.config
        self.model.train()
        self.started, resumed_from = time.perf_counter(), self.step
        self.stop_signal, self.stop_agreed = None, False
        reached_at, last_eval = None, None
        self.world.agree(self._open_tracker)  # rank 0's alone; one that cannot start stops every rank
        bar = tqdm(
            total=cfg.steps,
            initial=self.step,
            disable=not self.progress,
            unit="step",
            dynamic_ncols=True,
            desc=f"{self.task.name} on {self.model.weights_name}",
        )
        with self._stop_on_request():
            try:
                while self.step < cfg.steps:
                    try:  # drawing the batch too: a huge --batch-size fails there
                        batch = self.task.train_batch(self.step, cfg.batch_size, cfg.seed)
                        loss, accuracy = self.train_step(batch)
                    except (RuntimeError, ValueError, MemoryError) as exc:
                        raise self._failed(exc, "training") from None
                    self.step += 1
                    if not math.isfinite(loss):
                        raise self._diverged(f"loss became {loss}")
                    bar.update(1)
                    bar.set_postfix(
                        loss=f"{loss:.4f}", **({} if accuracy is None else {"acc": f"{accuracy:.3f}"}), refresh=False
                    )
                    if self.on_step is not None:
                        self.on_step(self.step, loss)
                    if self.step % cfg.eval_every == 0 or self.step == cfg.steps:
                        last_eval = self._evaluation_step(loss, bar)
                        if reached(last_eval, cfg.target_accuracy, cfg.target_mse) and not is_subset(last_eval):
                            reached_at = self.step
                            break
                    if self._stop_requested() and self.step < cfg.steps:
                        raise self._stop()
            finally:
                bar.close()
        if last_eval is None:  # resumed a finished run: nothing trained, still report where it stands
            last_eval = self._evaluate()
        summary = {
            "status": "target_reached" if reached_at else "completed",
            "step": self.step,
            "resumed_from_step": resumed_from,
            "target_accuracy": cfg.target_accuracy,
            "target_mse": cfg.target_mse,
            "target_reached_at_step": reached_at,
            "final": last_eval,
            "test": self._score_test_splits(),
            "wall_time_s": round(time.perf_counter() - self.started, 3),
            "world_size": self.world.size,
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


def train(
    config: TrainConfig,
    out: Path | None = None,
    progress: bool = True,
    on_step: Callable[[int, float], None] | None = None,
    ddp_backend: str | None = None,
    tracker: Tracker | None = None,
) -> tuple[dict, Path]:
    """Build everything, make the run directory (only once all inputs proved good), train.

    A run that fails before its first checkpoint leaves no directory behind. Ctrl-C or SIGTERM
    stops it after the step under way with a checkpoint (StopRequested), and a resume goes on
    exactly from there; one killed outright resumes from its last evaluation. Under torchrun every
    rank calls this; rank 0 alone makes and writes the directory, and all return its path.
    """
    return _in_process_group(ddp_backend, lambda world: _train(config, out, progress, on_step, world, tracker))


def _in_process_group(ddp_backend: str | None, work: Callable[[World], tuple[dict, Path]]) -> tuple[dict, Path]:
    """`work(world)` inside the process group of a torchrun job (or in this process alone)."""
    world = distributed.start(ddp_backend)
    try:
        result = work(world)
    except BaseException:
        distributed.stop(world, finished=False)
        raise
    distributed.stop(world)
    return result


def _train(
    config: TrainConfig,
    out: Path | None,
    progress: bool,
    on_step: Callable[[int, float], None] | None,
    world: World,
    tracker: Tracker | None,
) -> tuple[dict, Path]:
    config.task_options = task_options(config.task, config.task_options)  # defaults recorded too
    label = config.backbone if config.model == "fpt" else config.model

    def creatable_path() -> Path:  # rank 0 names it (the default has the time in it) for all ranks
        path = Path(out or RunDir.default_path(config.task, label))
        RunDir.check_creatable(path)  # before the backbone is loaded
        return path

    path = world.agree(creatable_path)
    task, model = _build_for_process(config, world)
    config.task_options.update(getattr(task, "pinned_options", {}))  # e.g. a forecast's file hash
    world.check_same("backbone weights", model.weights_hash)
    device = _device_of(model)
    # what ran, so a resume stays there unless told otherwise (each rank of a GPU job takes its own GPU)
    config.device = device.type if world.distributed and device.type == "cuda" else str(device)
    made: list[RunDir] = []
    world.agree(lambda: made.append(RunDir.create(path)))
    run_dir = made[0] if made else None
    trainer = None
    try:
        if run_dir is not None:
            run_dir.write_config(dataclasses.asdict(config))
        trainer = Trainer(model, task, config, run_dir, progress, on_step, world, tracker if world.is_main else None)
        return trainer.fit(), path
    except Exception:
        if run_dir is not None and (trainer is None or trainer.last_checkpoint_step is None):
            run_dir.remove()
        raise
    finally:
        if run_dir is not None:
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
        uint8 (N, H, W[, C]), token ids (N, L) with an optional mask, or the bit tasks' inputs); a
        forecast run's values (N, horizon) for windows x (N, lookback)."""
        import numpy as np

        from fpt.prediction import check_rows, predict_probabilities, predict_values, to_batches

        x, mask = np.asarray(x), None if mask is None else np.asarray(mask)
        check_rows(x, mask, None, self.task, "predict")
        outputs = predict_values if self.task.spec.regression else predict_probabilities
        return outputs(self.model, to_batches(self.task, x, mask, eval_batch_for(self.task, batch_size)))


def _read_run(run_dir: Path, lock: bool) -> tuple[RunDir, dict, Checkpoint | None]:
    """A run's directory (locked, to write to it), config and checkpoint (None before the first)."""
    run = RunDir.existing(run_dir)
    if lock:
        run.lock()
    try:
        checkpoint = load_checkpoint(run.checkpoint_path) if run.has_checkpoint or not lock else None
        return run, run.read_config(), checkpoint
    except BaseException:
        run.unlock()
        raise


def load_run(
    run_dir: Path, lock: bool = False, device: str | None = None, world: World = SINGLE, threads: int | None = None
) -> LoadedRun:
    """Rebuild a run from its directory and load its checkpoint (`lock`: to train on, see
    RunDir.lock; `device`: another device than the run's own, e.g. a GPU run continued on a CPU;
    `threads`: other torch threads than the run's own, e.g. a sweep cell's one scored on more).
    Ranks of a distributed run get what rank 0 read: only it needs to see the directory."""
    read: list[RunDir] = []

    def read_on_main() -> tuple[dict, Checkpoint | None]:
        run, data, checkpoint = _read_run(run_dir, lock)
        read.append(run)
        return data, checkpoint

    data, checkpoint = world.agree(read_on_main)
    run = read[0] if read else None
    try:
        config = TrainConfig.from_dict(data, where=str(Path(run_dir) / RunDir.CONFIG))
        if device is not None:
            config.device = device
        if threads is not None:
            config.threads = threads
        task, model = _build_for_process(config, world)
        world.check_same("backbone weights", model.weights_hash)
        trainer = Trainer(model, task, config, run, progress=False, world=world)
        # resuming a run killed before its first checkpoint starts again at step 0, exactly as it
        # first did: the model was just built from the same config and seed
        if checkpoint is not None:
            trainer.load(checkpoint, Path(run_dir) / RunDir.CHECKPOINT, resuming=lock)
    except BaseException:
        if run is not None:
            run.unlock()
        raise
    return LoadedRun(config, task, model, trainer)


def resume(
    run_dir: Path,
    steps: int | None = None,
    progress: bool = True,
    on_step: Callable[[int, float], None] | None = None,
    device: str | None = None,
    ddp_backend: str | None = None,
    tracker: Tracker | None = None,
    threads: int | None = None,
) -> tuple[dict, Path]:
    """Continue a run from its last checkpoint, to its configured steps or to `steps` (under
    torchrun with as many ranks as it was trained with)."""
    if steps is not None and steps < 1:
        raise FptError(f"--steps must be at least 1, got {steps}")
    return _in_process_group(
        ddp_backend, lambda world: _resume(run_dir, steps, progress, on_step, device, tracker, world, threads)
    )


def _resume(
    run_dir: Path,
    steps: int | None,
    progress: bool,
    on_step: Callable[[int, float], None] | None,
    device: str | None,
    tracker: Tracker | None,
    world: World,
    threads: int | None,
) -> tuple[dict, Path]:
    config, _, _, trainer = load_run(run_dir, lock=True, device=device, world=world, threads=threads)
    try:
        if steps is not None and steps != config.steps and config.lr_schedule != "constant":
            raise FptError(
                f"this run's {config.lr_schedule} schedule decays to 0 at step {config.steps}; --steps "
                f"{steps} would change its learning rate from here on; train a new run to that length"
            )
        if steps is not None and steps < trainer.step:
            raise FptError(f"this run is at step {trainer.step:,}; --steps {steps} would end it before where it is")
        if steps is not None:
            config.steps = steps
        if trainer.run_dir is not None:
            if steps is not None:  # only the length: --device and --threads hold for this sitting alone
                trainer.run_dir.write_config({**trainer.run_dir.read_config(), "steps": steps})
            kept = trainer.run_dir.truncate_metrics(trainer.step)
            if trainer.elapsed_before is None:  # a checkpoint from before they held the time: its evaluation's
                trainer.elapsed_before = kept[-1].get("elapsed_s", 0.0) if kept else 0.0
            trainer.tracker = tracker  # rank 0's alone
        trainer.progress, trainer.on_step = progress and world.is_main, on_step
        return trainer.fit(), Path(run_dir)
    finally:
        if trainer.run_dir is not None:
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
