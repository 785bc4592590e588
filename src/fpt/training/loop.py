"""The training loop (nanoGPT's train.py, as a class): Adam on the trained parameters over
micro-batches, clipping, an fp16 loss scaler, evaluation on the whole held-out split,
checkpoints, and a stop at a step boundary on Ctrl-C or SIGTERM. The run's lifecycle (its
directory, resume, the process group) is fpt.training.lifecycle's."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from pathlib import Path
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from fpt.core.errors import DIVERGED, USAGE, FptError, StopRequested
from fpt.core.scores import better, describe, reached
from fpt.models.ends import TrainableModel
from fpt.tasks import Task
from fpt.tasks.base import Batch, series_tokens
from fpt.tracking import Tracker
from fpt.training import distributed
from fpt.training.checkpoint import BestState, Checkpoint, RngState, restore, save_checkpoint
from fpt.training.config import TrainConfig
from fpt.training.distributed import SINGLE, World
from fpt.training.evaluation import device_of, evaluate
from fpt.training.run_dir import RunDir, is_subset
from fpt.training.speed import CONVENTION, ModelFlops, SpeedMeter, describe_speed, measured_peak
from fpt.training.stopping import EvaluationInterrupted, RunStop


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


class StepCounts(NamedTuple):
    """What one step's all-reduce sums over the ranks: enough for the whole batch's loss and
    accuracy, and the vote to stop (ranks signalled at different moments all stop after the same step)."""

    loss_sum: float  # the loss summed over examples
    correct: float  # labels predicted right (a classifier)
    examples: float
    labels: float  # examples x outputs per example
    stop_votes: float  # ranks asked to stop

    @property
    def loss(self) -> float:
        """The mean loss per example over the whole batch (every rank's share)."""
        return self.loss_sum / self.examples

    @property
    def accuracy(self) -> float:
        """The fraction of labels predicted right over the whole batch (a classifier's)."""
        return self.correct / self.labels


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
        progress: bool | str = True,
        on_step: Callable[[int, float], None] | None = None,
        world: World = SINGLE,
        tracker: Tracker | None = None,
    ):
        config.validate(world.size)  # from Python too: eval_every 0 or lr -1 fail here, in one line
        config.check_fits(task)  # e.g. --keep-best on a task whose training watches its test split
        self.model, self.task, self.config, self.world = model, task, config, world
        self.run_dir = run_dir if isinstance(run_dir, RunDir) or run_dir is None else RunDir(run_dir)
        # True: a bar and a line per evaluation; PROGRESS_LINES: the lines alone; False: neither
        self.progress, self.on_step = (progress if world.is_main else False), on_step
        self.tracker = tracker  # MLflow, TensorBoard, W&B (fpt.tracking); needs a run directory
        if tracker is not None and self.run_dir is None:
            raise FptError("experiment tracking mirrors a run directory; give the Trainer a run_dir")
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise FptError("this policy trains no parameter; include at least one group (e.g. output)")
        self.optimizer = torch.optim.Adam(self.params, lr=config.lr)
        self.device = device_of(model)
        # fp16 needs its loss scaled so small gradients do not flush to zero (bf16 has fp32's range);
        # disabled, it passes the loss through unchanged and train_step steps the optimizer itself
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=config.precision == "fp16")
        self.forward = distributed.wrap(model, world)
        if world.distributed:  # ranks drop different units; a checkpoint restores each rank's state
            torch.manual_seed(distributed.rank_seed(config.seed, world.rank))
        self.step = 0
        self.last_checkpoint_step: int | None = None
        # seconds of training before this process resumed the run (elapsed_s counts from step 0);
        # None after loading a checkpoint too old to hold it (resume takes it from the metrics)
        self.elapsed_before: float | None = 0.0
        self.started: float | None = None  # when this process's fit() began
        self.stop = RunStop(world.is_main, world.distributed)  # Ctrl-C, SIGTERM, --max-minutes during fit
        # stopped during the evaluation of `self.step` (the checkpoint's): its train loss, to make it first
        self.pending_evaluation: float | None = None
        self.meter = SpeedMeter(None)  # this sitting's speed (fit makes it, with the peak where progress is shown)
        self.model_flops: ModelFlops | None = None
        self.best: BestState | None = None  # --keep-best: the best whole-split evaluation's weights so far

    def load(self, checkpoint: Checkpoint, path: Path, resuming: bool = False) -> None:
        """Continue from `checkpoint` (read from `path`): parameters, Adam state, step, this rank's
        RNG state. `resuming` (training on) needs the world size the checkpoint was saved with."""
        if resuming:
            checkpoint.check_world_size(self.world.size, path)
        restore(self.model, checkpoint, path)
        try:
            self.optimizer.load_state_dict(checkpoint.optimizer_state)
            checkpoint.rng_states[min(self.world.rank, checkpoint.world_size - 1)].restore(self.device)
            if self.scaler.is_enabled() and checkpoint.grad_scaler is not None:
                self.scaler.load_state_dict(checkpoint.grad_scaler)
        except (ValueError, KeyError, RuntimeError) as exc:
            raise FptError(
                f"checkpoint {path} does not fit this run's optimizer ({str(exc)[:80]}); "
                "was it copied from another run?"
            ) from None
        self.step = self.last_checkpoint_step = checkpoint.step
        self.elapsed_before, self.best = checkpoint.elapsed_s, checkpoint.best
        self.pending_evaluation = checkpoint.pending_evaluation

    @property
    def weights_step(self) -> int:
        """The step of the weights a finished run is read with: --keep-best's best, else the last."""
        return self.step if self.best is None else self.best.step

    def restore_best(self) -> None:
        """--keep-best: put the best evaluation's weights in the model (no-op before there is one)."""
        if self.best is not None:
            with torch.no_grad():
                for name, value in self.model.trainable_state().items():
                    value.copy_(self.best.params[name])

    def _keep_if_best(self, result: dict) -> None:
        """--keep-best: copy the trained weights where `result` (a whole-split evaluation) beats the best."""
        if self.best is None or better(result, self.best.result):
            state = {name: value.detach().clone() for name, value in self.model.trainable_state().items()}
            self.best = BestState(self.step, state, result)
        else:
            self.best.evaluations_since += 1

    def elapsed(self) -> float:
        """Training seconds from step 0 to now, across resumes."""
        now = 0.0 if self.started is None else time.perf_counter() - self.started
        return (self.elapsed_before or 0.0) + now

    def _checkpoint(self) -> None:
        """Save the trained state, only while every trained tensor is finite (a diverged state is
        never kept as the 'last good' one); a failed write keeps the previous checkpoint."""
        try:
            rng_states = self.world.all_gather(RngState.here(self.device))  # every rank takes part
        except RuntimeError as exc:  # a peer killed meanwhile: one line, the launcher names it
            if self.world.distributed and distributed.is_peer_failure(exc):
                raise self._failed(exc, "saving a checkpoint") from None
            raise
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
                self.scaler.state_dict() if self.scaler.is_enabled() else None,
                round(self.elapsed(), 3),
                self.best,
                self.pending_evaluation,
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

    def train_step(self) -> tuple[float, float | None]:
        """One optimiser step: draw the step's batch, train on this rank's slice of it (accumulated over
        micro-batches), and return the loss and accuracy (None for a regression task) over the whole batch,
        the same on every rank. A failure or a non-finite loss ends the run in one line."""
        started = time.perf_counter()
        try:  # drawing the batch too: a huge --batch-size fails there
            batch = self.task.train_batch(self.step, self.config.batch_size, self.config.seed)
            share = len(batch) // self.world.size
            mine = batch.slice(self.world.rank * share, (self.world.rank + 1) * share).to(self.device)
            self.optimizer.zero_grad(set_to_none=True)
            loss_sum, correct = self._backward(mine)
            for group in self.optimizer.param_groups:
                group["lr"] = learning_rate(self.config, self.step)
            if self.scaler.is_enabled():  # fp16: unscaled to clip the true gradients; skipped where they overflowed
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.params, self.config.grad_clip)
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                torch.nn.utils.clip_grad_norm_(self.params, self.config.grad_clip)
                self.optimizer.step()
            counts = StepCounts(loss_sum, correct, len(mine), mine.y.numel(), float(self.stop.wanted()))
            if self.world.distributed:  # one small all-reduce: every rank sees the same loss and stops alike
                summed = self.world.all_reduce_sum(torch.tensor(counts, dtype=torch.float64, device=self.device))
                counts = StepCounts(*summed.tolist())
        except (RuntimeError, ValueError, MemoryError) as exc:
            raise self._failed(exc, "training") from None
        self.stop.agreed = counts.stop_votes > 0
        # the loss was read back (.item()), so an accelerator's work is done: the time is real
        self.meter.add_step(time.perf_counter() - started, len(batch), self._step_flops(batch))
        self.step += 1
        if not math.isfinite(counts.loss):
            raise self._diverged(f"loss became {counts.loss}")
        return counts.loss, None if self.task.spec.regression else counts.accuracy

    def _backward(self, batch: Batch) -> tuple[float, int]:
        """Gradients of the batch's mean loss, a micro-batch at a time; the summed loss and the labels right."""
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
                self.scaler.scale(loss * (len(part) / size)).backward()
            loss_sum += loss.item() * len(part)
            if not self.task.spec.regression:
                correct += (logits.argmax(-1) == part.y).sum().item()
        return loss_sum, correct

    def _diverged(self, what: str, kind: str = DIVERGED) -> FptError:
        where = (
            f"the last good checkpoint (step {self.last_checkpoint_step}) is in {self.run_dir}"
            if self.last_checkpoint_step is not None
            else "no checkpoint was saved yet"
        )
        return FptError(f"{what} at step {self.step}; stopped, {where}; try a lower --lr", kind)

    def _failed(self, exc: BaseException, doing: str) -> FptError:
        """An exception inside a step or an evaluation: out of memory, a peer rank gone, or a divergence."""
        if self.world.distributed and distributed.is_peer_failure(exc):
            return FptError(
                f"another rank stopped while {doing} at step {self.step}; the launcher's line says which rank and why"
            )
        if _is_out_of_memory(exc):
            size = (
                "--eval-batch-size"
                if doing == "evaluating"
                else "--batch-size (or --micro-batch-size, --checkpointing)"
            )
            return FptError(f"out of memory while {doing} at step {self.step}; lower {size}")
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        return self._diverged(f"{doing} failed ({type(exc).__name__}: {first_line})", USAGE)  # not known to be NaN

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
                interrupted=self.stop.interrupts_evaluation,
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
        results = [self._evaluate(whole=self.step == cfg.steps or cfg.eval_subset is None or cfg.keep_best)]
        if reached(results[0], cfg.target_accuracy, cfg.target_mse) and is_subset(results[0]):
            results.append(self._evaluate(whole=True))  # the target counts on the whole split
        records = []
        for result in results:
            if not math.isfinite(result["loss"]):
                raise self._diverged(f"held-out loss became {result['loss']}")
            speed = self.meter.recent_rates()
            records.append(
                {"step": self.step, "train_loss": train_loss, **result, "elapsed_s": round(self.elapsed(), 3), **speed}
            )
            if self.progress:
                bar.write(
                    f"step {self.step}: {result['split']} {describe(result)}, loss {result['loss']:.4f} | "
                    + describe_speed(speed, self._eta_s())
                )
        if self.run_dir is not None:
            for record in records:
                self.run_dir.append_metrics(record)
        if cfg.keep_best:
            self._keep_if_best(results[-1])
        self._checkpoint()
        if self.tracker is not None:  # after the checkpoint: a resume never makes these evaluations again
            for record in records:
                self.tracker.log_evaluation(self.step, record)
        return results[-1]

    def _open_tracker(self) -> None:
        """A new tracked run, or the same one continued and caught up with metrics.jsonl."""
        if self.tracker is not None:
            self.tracker.open(self.run_dir.path, dataclasses.asdict(self.config), self.run_dir.read_metrics())

    def _checkpoint_and_stop(self, max_minutes: float | None, evaluating: float | None = None) -> StopRequested:
        """Save where the run stands (unless the evaluation just did) and say how to go on. `evaluating`:
        the train loss of the step whose evaluation a signal interrupted, made first when resumed."""
        self.pending_evaluation = evaluating
        if self.last_checkpoint_step != self.step or evaluating is not None:
            self._checkpoint()
        left = "" if evaluating is None else f"its evaluation of step {self.step}"
        best = None if self.best is None else self.best.step
        return self.stop.error(self.step, self.config.steps, max_minutes, self._resume_command(), left, best)

    def _resume_command(self) -> str:
        return f"`fpt train --resume {self.run_dir.path}`" if self.run_dir is not None else "`fpt train --resume`"

    def fit(self, max_minutes: float | None = None) -> dict:
        """Train to config.steps (or the target accuracy or MSE, or the end of --patience); returns the
        summary. Ctrl-C or SIGTERM lets the step under way finish (or interrupts the evaluation under way),
        saves a checkpoint and raises StopRequested, so a resume loses nothing (fpt.training.stopping); so
        does the end of `max_minutes` of this sitting (TimeLimitReached; litgpt's max_time)."""
        cfg = self.config
        self.model.train()
        self._start_meter()  # before the clock starts: measuring the peak is not training time
        self.started, resumed_from = time.perf_counter(), self.step
        self.stop.start(max_minutes)
        self.world.agree(self._open_tracker)  # rank 0's alone; one that cannot start stops every rank
        last_eval = reached_at = None  # the last evaluation, and the step that reached the target
        with self._progress_bar() as bar, self.stop.signals:
            if self.pending_evaluation is not None:  # a signal interrupted this step's evaluation: make it first
                last_eval, reached_at = self._evaluate_and_check(self.pending_evaluation, bar, max_minutes)
            while self.step < cfg.steps and reached_at is None and not self._out_of_patience():
                loss, accuracy = self.train_step()
                self._show_step(bar, loss, accuracy)
                if self.step % cfg.eval_every == 0 or self.step == cfg.steps:
                    last_eval, reached_at = self._evaluate_and_check(loss, bar, max_minutes)
                    if reached_at is not None or self._out_of_patience():
                        break
                if self.stop.requested() and self.step < cfg.steps:
                    raise self._checkpoint_and_stop(max_minutes)
            self.restore_best()  # --keep-best: the run ends with, and scores test with, its best weights
            try:  # none: resumed a finished run
                summary = self._summary(last_eval or self._evaluate(), reached_at, resumed_from)
            except EvaluationInterrupted:  # the last step's checkpoint is saved: a resume scores the test split
                unfinished = "scoring the test split"
                raise self.stop.error(self.step, cfg.steps, None, self._resume_command(), unfinished) from None
        if self.run_dir is not None:
            self.run_dir.write_summary(summary)
        if self.tracker is not None:
            self.tracker.finish(summary, self.run_dir.artifacts())
        return summary

    def _show_step(self, bar, loss: float, accuracy: float | None) -> None:
        """The bar's step, loss and speed, and the caller's on_step."""
        bar.update(1)
        shown = f"loss {loss:.4f}" + ("" if accuracy is None else f", acc {accuracy:.3f}")
        bar.set_postfix_str(f"{shown}, {describe_speed(self.meter.recent_rates(), self._eta_s(), True)}", refresh=False)
        if self.on_step is not None:
            self.on_step(self.step, loss)

    def _evaluate_and_check(self, loss: float, bar, max_minutes: float | None) -> tuple[dict, int | None]:
        """This step's evaluation (stopped by a signal: checkpointed, to be made first when resumed),
        and this step where it reached the target on the whole split."""
        evaluating = time.perf_counter()
        self.pending_evaluation = None  # made now: the checkpoint this evaluation writes must not ask for it again
        try:
            result = self._evaluation_step(loss, bar)
        except EvaluationInterrupted:
            raise self._checkpoint_and_stop(max_minutes, evaluating=loss) from None
        self.meter.eval_s = time.perf_counter() - evaluating
        target = reached(result, self.config.target_accuracy, self.config.target_mse) and not is_subset(result)
        return result, (self.step if target else None)

    def _out_of_patience(self) -> bool:
        """--patience evaluations in a row have not beaten the best: early stopping's end."""
        patience = self.config.patience
        return patience is not None and self.best is not None and self.best.evaluations_since >= patience

    def _progress_bar(self) -> tqdm:
        return tqdm(
            total=self.config.steps,
            initial=self.step,
            disable=self.progress is not True,
            unit="step",
            dynamic_ncols=True,
            desc=f"{self.task.name} on {self.model.weights_name}",
            # tqdm's own rate and time left would count the evaluations as slow steps: the postfix has ours
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]",
        )

    def _start_meter(self) -> None:
        """A speed meter for this sitting, with this machine's matmul peak (measured once per machine, then
        cached: fpt.training.speed.measured_peak), so every run records its MFU, shown or not."""
        dtype = getattr(self.model, "compute_dtype", torch.float32)  # a baseline computes in fp32
        peak = measured_peak(dtype, self.device)
        self.meter = SpeedMeter(peak, devices=self.world.size)
        self.model_flops = ModelFlops.of(self.model)

    def _eta_s(self) -> float | None:
        return self.meter.eta_s(self.step, self.config.steps, self.config.eval_every)

    def _step_flops(self, batch: Batch) -> float | None:
        """The model FLOPs of a training step on `batch` (the global batch), by fpt.training.speed.CONVENTION."""
        if self.model_flops is None:
            return None
        length = batch.x.shape[1]
        if self.task.spec.patch_stride is not None:  # a series window: the body sees its patches
            length = series_tokens(length, self.model.embedder.linear.in_features, self.task.spec.patch_stride)
        return self.model_flops.step(len(batch), length)

    def _summary(self, last_eval: dict, reached_at: int | None, resumed_from: int) -> dict:
        """What summary.json holds; with --keep-best (the model holding its best weights by now)
        "final" is the best evaluation, and the test split is scored with those weights."""
        cfg = self.config
        best = {} if self.best is None else {"best_step": self.best.step}
        early = self.step < cfg.steps and self._out_of_patience()
        status = "target_reached" if reached_at else "stopped_early" if early else "completed"
        return {
            **best,
            "status": status,
            "step": self.step,
            "resumed_from_step": resumed_from,
            "target_accuracy": cfg.target_accuracy,
            "target_mse": cfg.target_mse,
            "target_reached_at_step": reached_at,
            "final": last_eval if self.best is None else self.best.result,
            "test": self._score_test_splits(),
            "wall_time_s": round(time.perf_counter() - self.started, 3),
            "world_size": self.world.size,
            "trained_params": sum(p.numel() for p in self.params),
            "total_params": sum(p.numel() for p in self.model.parameters()),
            "backbone_hash": self.model.weights_hash,
            "extended_positions": self.model.extended_positions,
            "task_notes": getattr(self.task, "notes", {}),
            **self.meter.sitting_rates(),  # this sitting's steps: ms_per_step (median), examples_per_s, mfu
            "peak_flops_per_s": self.meter.peak,  # one device's measured matmul peak; None: not measured
            "flops_convention": CONVENTION,
        }
