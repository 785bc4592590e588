"""A run's lifecycle: the entry points `train()`, `resume()` and `load_run()`, which make the
process settings (fpt.core.runtime), join the process group of a torchrun job and own the run
directory (fpt.training.run_dir). Building a task and a model is fpt.training.build's, the loop
fpt.training.loop's, scoring fpt.training.evaluation's; the names users need are at the top, `fpt.*`."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

import torch

from fpt.models.ends import TrainableModel
from fpt.tasks import Task, task_options
from fpt.tracking import Tracker
from fpt.training import distributed
from fpt.training.build import (
    build_for_process,
    resolve_steps,
)
from fpt.training.checkpoint import Checkpoint, load_checkpoint
from fpt.training.config import TrainConfig, check_max_minutes, check_resume_steps
from fpt.training.distributed import SINGLE, World
from fpt.training.evaluation import device_of, eval_batch_for
from fpt.training.loop import Trainer
from fpt.training.run_dir import RunDir


def say_task_choices(task: Task) -> None:
    """Say, when a run starts, what it evaluates on while training, what the task chose from the data where
    no option set it (a collection's look-back and patches) and what it left out (series too short), so none
    is a surprise later."""
    notes = getattr(task, "notes", {})
    if notes.get("evaluated_on"):
        print(f"{task.name}: {notes['evaluated_on']}", flush=True)
    if notes.get("chosen_from_data"):
        print(
            f"{task.name}: {notes['chosen_from_data']} (chosen from the data; --lookback, --patch-size and "
            "--patch-stride set them)",
            flush=True,
        )
    skipped = notes.get("skipped")
    if skipped:
        after_cut = f"after --cutoff {skipped['cutoff']} " if skipped.get("cutoff") else ""
        print(
            f"fpt: warning: {task.name}: {skipped['count']} series shorter than {skipped['min_length']} observations "
            f"{after_cut}left out (first: {', '.join(map(str, skipped['ids']))})",
            file=sys.stderr,
            flush=True,
        )


# Fewer held-out examples than this make a poor split to choose a step on: one example moves an
# accuracy by more than 3 points, more than most differences between two steps of a run
MIN_SELECTION_EXAMPLES = 30


def warn_small_selection(task: Task, config: TrainConfig) -> None:
    """Say, when a run starts, that the split it chooses on (--keep-best, --patience, --target-accuracy)
    holds too few examples to choose on, naming the fix; a classifier with splits of examples only."""
    chooses = config.keep_best or config.patience is not None or config.target_accuracy is not None
    split = getattr(task, "evals", {}).get(task.eval_split)
    if not chooses or split is None or task.spec.regression or len(split) >= MIN_SELECTION_EXAMPLES:
        return
    print(
        f"fpt: warning: {task.name}'s {task.eval_split} split, which this run chooses on, holds {len(split)} "
        f"examples (one moves its accuracy by {100 / len(split):.1f} points): too few to choose a step on; "
        f"hold out more (--val-size N, --heldout-fraction F) or train to a fixed --steps",
        file=sys.stderr,
        flush=True,
    )


def warn_grown_positions(model: TrainableModel, backbone: str) -> None:
    """Say, when a run starts, that its inputs are longer than the positions the backbone learned: the
    rows past them are interpolated (fpt.backbones.surgery.extend_positions), not pretrained."""
    grown = getattr(model, "extended_positions", None)
    if grown is not None:
        published, used = grown
        print(
            f"fpt: warning: the task's {used} tokens exceed the {published} positions {backbone} was pretrained "
            f"on; those past {published} are interpolated, not pretrained (a larger --patch-size or a shorter "
            "input keeps within them)",
            file=sys.stderr,
            flush=True,
        )


def train(
    config: TrainConfig,
    out: Path | None = None,
    progress: bool | str = True,
    on_step: Callable[[int, float], None] | None = None,
    ddp_backend: str | None = None,
    tracker: Tracker | None = None,
    max_minutes: float | None = None,
) -> tuple[dict, Path]:
    """Build everything, make the run directory (only once all inputs proved good), train.

    A run that fails before its first checkpoint leaves no directory behind. Ctrl-C or SIGTERM
    stops it after the step under way with a checkpoint (StopRequested), and a resume goes on
    exactly from there; one killed outright resumes from its last evaluation; so does one whose
    `max_minutes` ran out (TimeLimitReached). Under torchrun every rank calls this; rank 0 alone
    makes and writes the directory, and all return its path.
    """
    check_max_minutes(max_minutes)
    with process_group(ddp_backend) as world:
        path, config, task, model = _plan(config, out, world)
        made: list[RunDir] = []
        new_folders = [folder for folder in Path(path).parents if not folder.exists()]  # e.g. runs/ itself
        world.agree(lambda: made.append(RunDir.create(path)))
        run_dir = made[0] if made else None
        trainer = None
        with _writing(run_dir, tracker):
            try:
                if run_dir is not None:
                    run_dir.write_config(dataclasses.asdict(config))
                tracked = tracker if world.is_main else None
                trainer = Trainer(model, task, config, run_dir, progress, on_step, world, tracked)
                return _after_test(trainer, trainer.fit(max_minutes)), path
            except Exception:
                if run_dir is not None and (trainer is None or trainer.last_checkpoint_step is None):
                    _remove_run(run_dir, new_folders)
                raise


@contextlib.contextmanager
def process_group(ddp_backend: str | None) -> Iterator[World]:
    """The process group of a torchrun job (or this process alone) for the block, left as finished only
    when the block ends without an exception. A `with`, not a function taking the work, so that
    `fpt train` reaches the optimizer in four calls: cmd_train, train, Trainer.fit, Trainer.train_step."""
    world = distributed.start(ddp_backend)
    try:
        yield world
    except BaseException:
        distributed.stop(world, finished=False)
        raise
    distributed.stop(world)


def _plan(config: TrainConfig, out: Path | None, world: World) -> tuple[Path, TrainConfig, Task, TrainableModel]:
    """(the run directory's path, checked creatable; the run's plan, frozen; its task; its model): everything a
    run needs before its directory is made, each choice made from the data said once (rank 0)."""
    config = dataclasses.replace(config, task_options=task_options(config.task, config.task_options))  # defaults too
    label = config.backbone if config.model == "fpt" else config.model

    def creatable_path() -> Path:  # rank 0 names it (the default has the time in it) for all ranks
        path = Path(out or RunDir.default_path(config.task, label))
        RunDir.check_creatable(path)  # before the backbone is loaded
        return path

    path = world.agree(creatable_path)
    task, model, config = build_for_process(config, world)
    config, said = resolve_steps(config, task)
    if world.is_main:
        if said:
            print(said, flush=True)
        say_task_choices(task)
        warn_small_selection(task, config)
        warn_grown_positions(model, config.backbone)
    world.check_same("backbone weights", model.weights_hash)
    device = device_of(model)
    config = dataclasses.replace(
        config,
        task_options={**config.task_options, **getattr(task, "pinned_options", {})},  # e.g. a forecast's file hash
        # what ran, so a resume stays there unless told otherwise (each rank of a GPU job takes its own GPU)
        device=device.type if world.distributed and device.type == "cuda" else str(device),
    ).frozen()  # the run's plan: config.json, and what the Trainer runs; nothing changes it now
    config.validate(world.size)
    return path, config, task, model


def _after_test(trainer: Trainer, summary: dict) -> dict:
    """The summary, once its test split is scored (rank 0; or the held-out split a task without a test split
    reports, fpt.training.reference_scores.reported_split), with what a forecaster reads beside the score:
    the reference methods' scores on the same split where the run asks for them and the task has any
    (fpt.training.reference_scores), and a forecast's prediction intervals (a collection's or one series'
    windows') with their test coverage (fpt.training.intervals); written to summary.json too."""
    from fpt.training.reference_scores import reported_split, scored_tests

    tested = bool(scored_tests(summary))
    if not (trainer.world.is_main and (tested or reported_split(trainer.task, summary))):
        return summary
    from fpt.training.intervals import conformal_intervals, has_intervals

    added = {}
    if tested and has_intervals(trainer.task):
        added["intervals"] = conformal_intervals(trainer.model, trainer.task)
    if trainer.config.baselines:
        from fpt.training.reference_scores import baseline_scores

        beside = baseline_scores(trainer.task, summary, trainer.model)
        if beside is not None:
            added["baselines"] = beside
    if added:
        summary.update(added)
        if trainer.run_dir is not None:
            trainer.run_dir.write_summary(summary)
    return summary


@contextlib.contextmanager
def _writing(run_dir: RunDir | None, tracker: Tracker | None) -> Iterator[None]:
    """While a run trains (rank 0: it holds the directory's lock): close the tracker, then unlock."""
    try:
        yield
    finally:
        if run_dir is not None:
            if tracker is not None:
                tracker.close()
            run_dir.unlock()


def _remove_run(run_dir: RunDir, new_folders: list[Path]) -> None:
    """A run that failed before its first checkpoint leaves nothing: its directory, and the
    folders made for it (e.g. runs/) where they are still empty."""
    run_dir.remove()
    for folder in new_folders:  # the deepest first
        with contextlib.suppress(OSError):
            folder.rmdir()


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

        from fpt.training.inference import check_rows, predict_probabilities, predict_values, to_batches

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
        sitting = {"device": device, "threads": threads}  # this sitting's, not recorded
        config = dataclasses.replace(config, **{k: v for k, v in sitting.items() if v is not None})
        # a plan records the epochs asked beside the steps they came to; it is built from the steps alone
        # (TrainConfig.validate refuses a config that asks both), and keeps the epochs it recorded
        task, model, built = build_for_process(dataclasses.replace(config, epochs=None), world)
        config = dataclasses.replace(built, epochs=config.epochs).frozen()
        world.check_same("backbone weights", model.weights_hash)
        trainer = Trainer(model, task, config, run, progress=False, world=world)
        # resuming a run killed before its first checkpoint starts again at step 0, exactly as it
        # first did: the model was just built from the same config and seed
        if checkpoint is not None:
            trainer.load(checkpoint, Path(run_dir) / RunDir.CHECKPOINT, resuming=lock)
        if not lock:  # read, not trained on: a --keep-best run's result is its best weights
            trainer.restore_best()
    except BaseException:
        if run is not None:
            run.unlock()
        raise
    return LoadedRun(config, task, model, trainer)


def resume(
    run_dir: Path,
    steps: int | None = None,
    progress: bool | str = True,
    on_step: Callable[[int, float], None] | None = None,
    device: str | None = None,
    ddp_backend: str | None = None,
    tracker: Tracker | None = None,
    threads: int | None = None,
    max_minutes: float | None = None,
) -> tuple[dict, Path]:
    """Continue a run from its last checkpoint, to its configured steps or to `steps` (under
    torchrun with as many ranks as it was trained with), for at most `max_minutes` this time."""
    check_resume_steps(steps)
    check_max_minutes(max_minutes)
    with process_group(ddp_backend) as world:
        return _resume(run_dir, steps, progress, on_step, device, tracker, world, threads, max_minutes)


def _resume(
    run_dir: Path,
    steps: int | None,
    progress: bool | str,
    on_step: Callable[[int, float], None] | None,
    device: str | None,
    tracker: Tracker | None,
    world: World,
    threads: int | None,
    max_minutes: float | None = None,
) -> tuple[dict, Path]:
    config, _, _, trainer = load_run(run_dir, lock=True, device=device, world=world, threads=threads)
    with _writing(trainer.run_dir, tracker):
        check_resume_steps(steps, config, trainer.step)
        if steps is not None:  # the run's plan, longer
            config = trainer.config = dataclasses.replace(config, steps=steps, epochs=None).frozen()
        if trainer.run_dir is not None:
            if steps is not None:  # only the length: --device and --threads hold for this sitting alone
                trainer.run_dir.write_config({**trainer.run_dir.read_config(), "steps": steps, "epochs": None})
            kept = trainer.run_dir.truncate_metrics(trainer.step)
            if trainer.elapsed_before is None:  # a checkpoint from before they held the time: its evaluation's
                trainer.elapsed_before = kept[-1].get("elapsed_s", 0.0) if kept else 0.0
            trainer.tracker = tracker  # rank 0's alone
        trainer.progress, trainer.on_step = (progress if world.is_main else False), on_step
        return _after_test(trainer, trainer.fit(max_minutes)), Path(run_dir)
