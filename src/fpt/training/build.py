"""Building: a task and a model from a TrainConfig, with the memory plan and the policy applied.

Pure apart from `build_for_process`, which also makes the process settings a run needs
(fpt.core.runtime); nothing here writes a file.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import torch

from fpt.backbones.control_bodies import BACKBONE
from fpt.backbones.surgery import AUTO, auto_precision, check_precision, compute_dtype, enable_checkpointing
from fpt.core import runtime
from fpt.core.devices import resolve_device
from fpt.models.ends import TrainableModel, default_pooling
from fpt.models.policy import GroupRow
from fpt.models.transformer import FrozenPretrainedTransformer, group_rows_from_shapes
from fpt.tasks import Task, create_task
from fpt.tasks.base import training_examples
from fpt.tasks.bucketing import LengthBucketedTask
from fpt.training.config import DEFAULT_EPOCHS, DEFAULT_STEPS, LONG_INPUT, TrainConfig
from fpt.training.distributed import SINGLE, World

if TYPE_CHECKING:
    from fpt.models.baselines import Baseline


def build_task(config: TrainConfig) -> Task:
    """The task of a config: its options, --train-fraction and --bucket-window applied."""
    task = create_task(config.task, **config.task_options)
    config.check_fits(task)
    if config.train_fraction is not None:  # before bucketing: the share is of the split as stored
        task.keep_training_share(config.train_fraction)
    return task if config.bucket_window is None else LengthBucketedTask(task, config.bucket_window)


def build(config: TrainConfig) -> tuple[Task, TrainableModel]:
    """Task + model from a config, with the policy applied. Writes nothing, changes no process setting,
    and leaves `config` as it was (`plan_and_build` also returns what was resolved)."""
    config.validate()
    task = build_task(config)
    return task, plan_and_build(config, task)[1]


def build_for_process(config: TrainConfig, world: World = SINGLE) -> tuple[Task, TrainableModel, TrainConfig]:
    """(task, model, plan): build() after the process settings a run needs (threads, subnormals, heap
    threshold), the plan being `config` with every choice left to fpt resolved (`plan_and_build`);
    the pick of --precision auto said once, on stdout, by rank 0."""
    config.validate(world.size)
    precision, said = resolve_precision(config, world)
    if said is not None and world.is_main:
        print(said, flush=True)
    config = dataclasses.replace(config, precision=precision)
    runtime.configure_process(config.threads, config.precision)  # before the task: threads read its files
    task = build_task(config)
    if task.variable_length:
        runtime.limit_heap_fragmentation()
    plan, model = plan_and_build(config, task)
    return task, model, plan


def resolve_steps(config: TrainConfig, task: Task) -> tuple[TrainConfig, str | None]:
    """`config` with --steps set where it is unset or --epochs gives it, from the task's training examples
    (and a recipe's warm-up as long as that cut to a tenth of it), and the line that says so; as it was where
    --steps was given. Unset, it is DEFAULT_EPOCHS passes over the examples, at most DEFAULT_STEPS, or
    DEFAULT_STEPS where the task draws fresh examples every step (one with --epochs was refused by build_task)."""
    if config.epochs is None and config.steps is not None:
        return config, None
    examples, batch, fix = training_examples(task), config.batch_size, ""
    if config.epochs is not None and examples:
        steps = max(1, math.ceil(config.epochs * examples / batch))
        said = f"--epochs {config.epochs:g} -> {steps:,} steps ({examples:,} training examples, batch {batch})"
    elif not examples:
        steps = DEFAULT_STEPS
        said = f"{steps:,} steps: the default where a task draws fresh examples every step (--steps sets it)"
    else:
        passes = max(1, math.ceil(DEFAULT_EPOCHS * examples / batch))
        steps = min(DEFAULT_STEPS, passes)
        what = f"{DEFAULT_EPOCHS} passes over {examples:,} training examples at batch {batch}"
        said = (
            f"{steps:,} steps: {what} (the default from the data's size, at most {DEFAULT_STEPS:,})"
            if steps == passes
            else f"{steps:,} steps: the default's most ({what} would take {passes:,})"
        )
        fix = "; --steps or --epochs sets it"
    warmup = config.warmup_steps
    if warmup >= steps:
        warmup = steps // 10
        said += f", warm-up {warmup} steps"
    said += fix
    return dataclasses.replace(config, steps=steps, warmup_steps=warmup), said


def resolve_precision(config: TrainConfig, world: World = SINGLE) -> tuple[str, str | None]:
    """(the precision to compute in, the line that says what --precision auto picked, or None): auto
    becomes what it picks on the config's device (fp32 for a baseline, which computes in fp32 whatever
    it is given), so that config.json records a dtype and a resume elsewhere keeps it. Under torchrun
    every rank takes rank 0's pick: the ranks must compute alike, and one answer needs no rule for
    nodes that differ."""
    if config.precision != AUTO:
        return config.precision, None
    if config.model != "fpt":
        return "fp32", None
    precision, why = world.agree(lambda: auto_precision(resolve_device(config.device)))
    return precision, f"precision auto -> {precision}: {why}; --precision fp32 or bf16 sets it"


def build_model(config: TrainConfig, task: Task) -> TrainableModel:
    """The model of a config (`plan_and_build`'s, without the plan)."""
    return plan_and_build(config, task)[1]


def plan_and_build(config: TrainConfig, task: Task) -> tuple[TrainConfig, TrainableModel]:
    """(the plan, the model on its --device): the plan is a copy of `config` with every choice left to
    fpt made (--precision auto, the pooling, a control body's policy, checkpointing and micro-batches),
    what config.json records and the Trainer runs; `config` itself is left as it was."""
    config, device = _resolved(config)
    if config.model != "fpt":
        return config, _build_baseline(config, task).to(device)
    plan, model = _build_transformer(config, task)
    return plan, model.to(device)


def _resolved(config: TrainConfig) -> tuple[TrainConfig, torch.device]:
    """(`config` with --precision auto resolved, the device): the first choices of a plan."""
    config = dataclasses.replace(config, precision=resolve_precision(config)[0])  # said by build_for_process
    device = resolve_device(config.device)
    check_precision(config.precision, device_type=device.type)
    return config, device


def counts_without_weights(config: TrainConfig, task: Task) -> tuple[TrainConfig, str, list[GroupRow]] | None:
    """What `fpt info` says of the model `plan_and_build(config, task)` would build, without building
    it: (the plan's precision, pooling and policy resolved, the backbone's family, the model's
    `group_rows`), the body read from its files (fpt.backbones.shapes: no transformers, no weights;
    `fpt info` on MiniLM took 3.0x a bare `import torch` timed beside it, now 1.0x). Only for a
    pretrained body as published: None for --layers, --attention, a control body, int8 storage, a
    baseline, or a body its files do not describe, where the model is built.
    tests/training/test_info_counts.py holds both ways to the same counts."""
    from fpt.backbones.shapes import body_shapes

    as_published = ("fpt", BACKBONE, "pretrained", None, None)
    if (config.model, config.body, config.init, config.layers, config.attention) != as_published:
        return None
    plan = _resolved(config)[0]
    if plan.precision.startswith("int8"):  # the quantiser refuses some policies: the build says so
        return None
    body = body_shapes(plan.backbone, task.spec.seq_len)
    if body is None:
        return None
    plan = dataclasses.replace(plan, pooling=plan.pooling or default_pooling(task.spec))
    rows = group_rows_from_shapes(body, task.spec, plan.policy, plan.pooling, plan.dropout, plan.extra_positions)
    if rows is None:
        return None
    compute_dtype(plan.precision)  # refused as the model's build refuses it
    return plan, body.family, rows


# With attention dropout, CPU attention cannot use its fused kernels and stores batch x heads x L^2
# probabilities per layer: a step of CIFAR-10 LRA (1024 tokens, batch 16, MiniLM) peaked at 17.3 GB.
# Where that happens, activation checkpointing (exact: dropout masks are replayed) keeps one block's
# attention at a time (a 4.78 GiB peak, benchmarks/results/memory.json), and micro-batches keep that
# block's attention within this budget (same gradients in expectation; the dropout masks are drawn
# per micro-batch).
ATTENTION_BYTES_BUDGET = 2.5e9
_BYTES_PER_ATTENTION_WEIGHT = 12  # probabilities and their gradient in fp32, the dropout mask and a temporary


def plan_memory(
    config: TrainConfig, spec, heads: int, layers: int = 1, can_checkpoint: bool = True, device_type: str = "cpu"
) -> dict:
    """{"checkpointing", "micro_batch_size"} where `config.checkpointing` is None (auto): checkpointing
    and, with it, an automatic --micro-batch-size; {} where the config chose.

    Only where attention keeps its probabilities: CUDA's fused kernels apply dropout themselves.
    A body that cannot recompute its blocks (e.g. a ViT) gets micro-batches sized for all layers.
    """
    if config.checkpointing is not None:
        return {}
    attention = config.dropout if config.attention_dropout is None else config.attention_dropout
    long_with_dropout = attention > 0 and spec.seq_len >= LONG_INPUT and device_type != "cuda"
    planned = {"checkpointing": long_with_dropout and can_checkpoint}
    if long_with_dropout and config.micro_batch_size is None and layers:  # --body none: no attention
        stored_layers = 1 if planned["checkpointing"] else layers
        per_example = heads * spec.seq_len**2 * _BYTES_PER_ATTENTION_WEIGHT * stored_layers
        fits = max(1, int(ATTENTION_BYTES_BUDGET // per_example))
        planned["micro_batch_size"] = fits if fits < config.batch_size else None
    return planned


def _build_transformer(config: TrainConfig, task: Task) -> tuple[TrainConfig, FrozenPretrainedTransformer]:
    """(the plan, the model): the backbone first, since its heads and depth size the memory plan."""
    # here, not above: it imports transformers (2 s), which `fpt info` does without (counts_without_weights)
    from fpt.backbones import load_backbone

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
    memory = plan_memory(
        config,
        task.spec,
        getattr(body, "num_attention_heads", 1),
        getattr(body, "num_hidden_layers", 1),
        getattr(backbone.model, "supports_gradient_checkpointing", False),
        resolve_device(config.device).type,
    )
    plan = dataclasses.replace(
        config,
        **memory,
        pooling=config.pooling or default_pooling(task.spec),  # recorded in config.json as it ran
        policy="full" if config.body != "backbone" else config.policy,  # a control trains all it has
    )
    if plan.checkpointing:
        enable_checkpointing(backbone.model)
    torch.manual_seed(plan.seed)  # the new input and output layers
    model = FrozenPretrainedTransformer(
        backbone,
        task.spec,
        policy=plan.policy,
        pooling=plan.pooling,
        dropout=plan.dropout,
        extra_positions=plan.extra_positions,
        precision=plan.precision,
    )
    return plan, model


def _build_baseline(config: TrainConfig, task: Task) -> Baseline:
    from fpt.models.baselines import build_baseline

    match = None
    if config.model == "cnn-matched":  # as many parameters as the FPT of this config trains
        fpt_model = _build_transformer(dataclasses.replace(config, model="fpt"), task)[1]
        match = sum(p.numel() for p in fpt_model.parameters() if p.requires_grad)
    torch.manual_seed(config.seed)
    return build_baseline(config.model, task, dropout=config.dropout, match_params=match)
