"""TrainConfig: everything that defines a run, the single source of defaults, help texts and
choices for the CLI (its `fpt train` options are generated from the fields), sweeps and
config.json; `validate` checks numbers here and names through each one's own lookup."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

# The names and choices come from fpt.core.choices, and what checks a value is imported where it is
# called: the option parser is generated from this module, and `fpt --help` must not import torch
# (issue 59).
from fpt.core.choices import (
    ATTENTIONS,
    AUTO,
    BACKBONE,
    BODIES,
    DEVICE_CHOICES,
    INITS,
    MODELS,
    POLICIES,
    POOLINGS,
    PRECISION_CHOICES,
    task_names,
)
from fpt.core.errors import FptError, check_type, quoted

# Options only transformer models take: refused for a baseline --model, and left out of a sweep's
# baseline cells when the sweep sets them for every cell.
TRANSFORMER_ONLY_OPTIONS = ("attention", "precision", "checkpointing", "compile", "body", "pooling")


LR_SCHEDULES = ("constant", "cosine")
# --steps where none is given: DEFAULT_EPOCHS passes over a task's training examples, at most DEFAULT_STEPS (a
# large set trains no longer than it did when every run took DEFAULT_STEPS); DEFAULT_STEPS where a task draws
# fresh examples every step. A hundred passes were chosen on validation over five UCR/UEA sets under this
# command's defaults (benchmarks/ucr_budget.py, results/ucr_budget/): mean validation accuracy 80.6% against
# 76.9% for the former fixed 2,000 steps and 71.5% for ten passes, in 182 to 1,350 steps. The validation
# splits are small (7 to 54 series), and on test the former 2,000 steps scored 2.1 points more on average:
# the case for the budget is its cost (a tenth to two thirds of the steps there) at a validation score at
# least as good, not accuracy.
DEFAULT_EPOCHS = 100
DEFAULT_STEPS = 2000
# tokens from which attention dropout turns --checkpointing on by default (fpt.training.build.plan_memory)
LONG_INPUT = 512

# Named sets of defaults. "paper": the paper's (Adam 1e-3, constant, clip 1, batch 16), what `fpt reproduce` uses.
# "fast": measured to reach the same accuracy in less wall time on our CPUs (benchmarks/converge.py,
# benchmarks/recipes.md "How the fast recipe was chosen"); the trained parameters are few, so they take a larger,
# decaying rate, and no dropout: a frozen body underfits, and dropout 0 scored 1.6-2.0 points higher on MNIST and
# Fashion-MNIST validation splits. Precision auto, as by default (bf16 only where the device computes it natively:
# emulated on a CPU, it was up to 20x slower than fp32), said here because the recipe was measured with it.
RECIPES: dict[str, dict] = {
    "paper": {},
    "fast": {
        "lr": 3e-3,
        "lr_schedule": "cosine",
        "warmup_steps": 100,
        "batch_size": 32,
        "eval_subset": 2000,
        "precision": AUTO,
        "dropout": 0.0,
    },
}
# What a recipe sets only where the transformer's attention and feed-forward weights are all
# frozen, the regime it was measured in: a baseline, or a policy that trains body weights, keeps
# the default dropout.
_FROZEN_BODY_ONLY = ("dropout",)
_BODY_GROUPS = frozenset({"attention", "last-attention", "feedforward"})


def recipe_defaults(recipe: str) -> dict:
    """The options a recipe sets, the same on every machine (its precision auto is resolved where
    the model is built: fpt.training.build.resolve_precision)."""
    if recipe not in RECIPES:
        raise FptError(f"unknown --recipe {quoted(recipe)}; choose {' or '.join(RECIPES)}")
    return dict(RECIPES[recipe])


def option(default=None, help: str = "", choices=None, group: str = "train", **kwargs):
    """A TrainConfig field with what `fpt train --help` says of it, written once: `help`, the
    `choices` (a tuple, a mapping of names to what each is, or a function listing them) and the
    `group` ("model": also an `fpt info` option; "train"; None: not a command-line option)."""
    if "default_factory" not in kwargs:
        kwargs["default"] = default
    return field(metadata={"help": help, "choices": choices, "group": group}, **kwargs)


# The help of the two options with long explanations (kept here, beside their fields' meaning)
_PRECISION_HELP = (
    "auto: bf16 where the device computes it natively (a CPU with AVX512-BF16 or AMX, a CUDA GPU of compute "
    "capability 8.0 or later), else fp32 (MPS too: unmeasured there); the pick is printed and config.json records "
    "it, so a resume keeps it anywhere. bf16: frozen weights in bfloat16, bf16 matmuls, a MiniLM step 1.6-1.7x "
    "fp32's on an AMD EPYC with AVX512-BF16 (benchmarks/results/int8/), unmeasured on GPUs, half the memory, changes "
    "numerics; fp16: CUDA only, with a loss scaler; int8: the frozen attention and feed-forward weights stored "
    "in int8 (a quarter of fp32's memory), products in fp32 (0.9-1.0x fp32's step); int8-bf16: the same "
    "storage, products in bf16 (where bf16 is native: 1.5-1.7x int8's step). Trained weights and Adam stay fp32"
)
_RECIPE_HELP = (
    "the named defaults that fill the options not given (given ones win): paper (Adam 1e-3 constant, "
    "batch 16, dropout 0.1: the paper's) | fast (Adam 3e-3, warm-up then cosine, batch 32, no dropout on a "
    "frozen body: measured to reach the same accuracy in less time; see benchmarks/recipes.md); both precision auto"
)


@dataclass
class TrainConfig:
    """Everything that defines a run; saved as config.json and enough to rebuild it. Each field's
    metadata is its `fpt train` option (see `option`)."""

    task: str = option("bit-xor", "npz:PATH: your own arrays", task_names, "model")
    task_options: dict = option(help="e.g. {'n_bits': 1000, 'patch_size': 50}", group=None, default_factory=dict)
    train_fraction: float | None = option(
        help="dataset tasks: train on the first fraction F of the training split, in its stored order (a "
        "forecast: the earliest windows), floor(F x N) examples; validation and test unchanged (few-shot: "
        "the published setting is 0.1)",
        group="model",
    )
    model: str = option(
        "fpt",
        "fpt: a frozen transformer; the others fully trained baselines: cnn for image tasks, cnn-matched sized "
        "to the FPT's trained count, -frozen: LSTM layers left at random init",
        MODELS,
        "model",
    )
    backbone: str = option("minilm", "registered name, local directory or hub id", group="model")
    init: str = option("pretrained", "bit: trained on Bit Memory, see `fpt export-backbone`", INITS, "model")
    policy: str = option("fpt", "or a comma list of groups (fpt.models.policy.GROUPS)", tuple(POLICIES), "model")
    body: str = option(
        "backbone",
        "a control keeps the backbone's position table and trains every parameter it has",
        BODIES,
        "model",
    )
    layers: int | None = option(
        help="keep only the first K transformer blocks (--init random: build K, as many as asked)", group="model"
    )
    pooling: str | None = option(
        help="last: the last-k tokens, the paper's; flatten: every token, the forecasts'; unset: the task's",
        choices=POOLINGS,
        group="model",
    )
    attention: str | None = option(
        help="unset: as pretrained (MiniLM/BERT bidirectional, GPT-2/Llama causal); causal masks an encoder as "
        "GPT-2 is, so only the last token sees the whole input",
        choices=ATTENTIONS,
        group="model",
    )
    extra_positions: bool = option(False, "add a learned position table (for RoPE backbones)", group="model")
    dropout: float = option(0.1, "dropout in the backbone and the new layers", group="model")
    attention_dropout: float | None = option(
        help="dropout on attention probabilities (unset: --dropout); 0 lets CPU attention use its fused "
        "kernel, several times faster on long inputs such as ListOps",
        group="model",
    )
    steps: int | None = option(
        help=f"optimiser steps (default: {DEFAULT_EPOCHS} passes over a task's training examples, at most "
        f"{DEFAULT_STEPS:,} steps; {DEFAULT_STEPS:,} where a task draws fresh examples every step)"
    )
    epochs: float | None = option(
        help="passes over the training examples: sets --steps from the data's size (said when the run starts; "
        "a task that draws fresh examples every step has none)"
    )
    batch_size: int = option(16, "examples per step (the global batch, split among --nproc processes)")
    micro_batch_size: int | None = option(
        help="split each batch into micro-batches (less memory; the same gradients up to dropout masks)"
    )
    lr: float = option(1e-3, "Adam learning rate")
    grad_clip: float = option(1.0, "gradient-norm clip")
    eval_every: int = option(100, "evaluate and checkpoint every N steps")
    eval_batch_size: int = option(256, "examples per evaluation batch (fewer for long sequences)")
    target_accuracy: float | None = option(help="stop once held-out accuracy reaches this fraction")
    target_mse: float | None = option(help="a forecast: stop once held-out MSE is at most this")
    keep_best: bool = option(
        False,
        "end with the weights of the best held-out evaluation (lowest MSE, highest accuracy), not the last "
        "step's, and score the test split with them: early stopping's choice, made on validation alone; every "
        "evaluation then scores the whole held-out split (--eval-subset is not used)",
    )
    patience: int | None = option(
        help="with --keep-best: stop once this many evaluations in a row have not beaten the best"
    )
    baselines: bool = option(
        True,
        "once the test split is scored, the field's reference methods on the same split, through the same metric "
        "code, printed and recorded beside fpt's score (a collection of series: Naive, SeasonalNaive, Naive2, "
        "Theta, AutoETS from statsforecast; a forecast's windows: Naive, SeasonalNaive, Theta, AutoETS by MSE and "
        "MAE); --no-baselines skips them",
    )
    seed: int = option(0, "seeds the new layers, the batches and dropout", group="model")
    # a function of the step alone: a resumed run needs no scheduler state
    lr_schedule: str = option("constant", "cosine: to 0 at --steps, after --warmup-steps", LR_SCHEDULES)
    warmup_steps: int = option(0, "the rate rises linearly from lr/N to lr over these N steps")
    eval_subset: int | None = option(
        help="evaluate the first N held-out examples in between (recorded as split[:N]; a forecast: every k-th "
        "window, all its channels, at least one window, split[::k windows]); the whole split at the end"
    )
    recipe: str = option("paper", _RECIPE_HELP)
    # Speed (benchmarks/perf.py). Exact: checkpointing, bucket_window, threads; opt-in numerics: precision, compile.
    precision: str = option(AUTO, _PRECISION_HELP, PRECISION_CHOICES, "model")
    checkpointing: bool | None = option(
        help="recompute each block in backward: same numbers, much less memory, about 1.4x step time; unset: on "
        f"(with micro-batches) where attention dropout meets inputs of {LONG_INPUT} tokens or more",
        group="model",
    )
    compile: bool = option(False, "torch.compile the backbone (eager where unavailable)", group="model")
    bucket_window: int | None = option(
        help="batch variable-length sequences of similar length, per window of N batches", group="model"
    )
    threads: int | None = option(help="torch intra-op threads (unset: one per core this process may use)")
    device: str = option(
        "auto", "auto: CUDA if there is one, else MPS, else the CPU", tuple(DEVICE_CHOICES.split(" | ")), "model"
    )

    def frozen(self) -> "TrainConfig":
        """A copy that refuses every change: a run's plan, resolved once (fpt.training.build), which
        config.json records and the Trainer runs (dataclasses.replace makes a changeable copy)."""
        copy = dataclasses.replace(self)
        object.__setattr__(copy, "_frozen", True)
        return copy

    def __setattr__(self, name: str, value) -> None:
        if getattr(self, "_frozen", False):
            raise dataclasses.FrozenInstanceError(
                f"a run's plan is frozen: cannot set {name}; make a changed copy with dataclasses.replace"
            )
        object.__setattr__(self, name, value)

    def validate(self, world_size: int = 1) -> None:
        """Check every value; `world_size`: the number of ranks the global batch is split among."""
        from fpt.backbones.surgery import check_dropout_rates
        from fpt.core.devices import check_device_name
        from fpt.tasks.base import check_train_fraction
        from fpt.tasks.bucketing import check_bucket_window

        if self.steps is not None and self.epochs is not None and not getattr(self, "_frozen", False):
            # a plan records both: the epochs asked and the steps they came to (fpt.training.build.resolve_steps)
            raise FptError(
                "--epochs sets --steps from the data's size: give one of them, not both (a run's config.json "
                "records both: drop its epochs to train its steps again)"
            )
        for key in ("steps", "batch_size", "eval_every", "eval_batch_size"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise FptError(f"--{key.replace('_', '-')} must be at least 1, got {getattr(self, key)}")
        if self.batch_size % world_size:
            raise FptError(
                f"--batch-size {self.batch_size} (the global batch) does not split evenly among "
                f"{world_size} processes; use a multiple of {world_size}"
            )
        if self.micro_batch_size is not None and not 1 <= self.micro_batch_size <= self.batch_size:
            raise FptError(f"--micro-batch-size must be between 1 and --batch-size ({self.batch_size})")
        if self.epochs is not None and not (self.epochs > 0 and math.isfinite(self.epochs)):
            raise FptError(f"--epochs must be a positive number, got {self.epochs}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise FptError(f"--lr must be a positive number, got {self.lr}")
        check_dropout_rates(self.dropout, self.attention_dropout)
        if not self.grad_clip > 0:
            raise FptError(f"--grad-clip must be positive, got {self.grad_clip}")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise FptError(f"--target-accuracy is a fraction in (0, 1], got {self.target_accuracy}")
        if self.target_mse is not None and not (self.target_mse > 0 and math.isfinite(self.target_mse)):
            raise FptError(f"--target-mse must be a positive number, got {self.target_mse}")
        if self.patience is not None and (self.patience < 1 or not self.keep_best):
            raise FptError(f"--patience needs --keep-best and at least 1 evaluation, got {self.patience}")
        check_train_fraction(self.train_fraction)
        if not 0 <= self.seed < 2**63:
            raise FptError(f"--seed must be in 0..2^63-1, got {self.seed}")
        check_threads(self.threads)
        check_bucket_window(self.bucket_window)
        check_device_name(self.device)
        if self.lr_schedule not in LR_SCHEDULES:
            raise FptError(f"unknown --lr-schedule {quoted(self.lr_schedule)}; choose {' or '.join(LR_SCHEDULES)}")
        # where --steps is unset, its default is set from the task's size (fpt.training.build.resolve_steps), which
        # then cuts a warm-up as long as the run to a tenth of it and says so
        if self.warmup_steps < 0 or (self.warmup_steps and self.steps and self.warmup_steps >= self.steps):
            raise FptError(
                f"--warmup-steps must be at least 0 and below --steps ({self.steps}), got "
                f"{self.warmup_steps}" + (f" (from --recipe {self.recipe})" if self.recipe != "paper" else "")
            )
        if self.eval_subset is not None and self.eval_subset < 1:
            raise FptError(f"--eval-subset must be at least 1, got {self.eval_subset}")
        if self.recipe not in RECIPES:
            raise FptError(f"unknown --recipe {quoted(self.recipe)}; choose {' or '.join(RECIPES)}")
        self._check_names()

    def check_fits(self, task) -> None:
        """Refuse the options this task cannot honour (before its model is built, and again by a Trainer
        made from Python): a stopping target of the other kind, which would never be met; --epochs where
        the task draws fresh examples every step; --keep-best choosing its step on a test split."""
        from fpt.tasks.base import training_examples

        if task.spec.regression and self.target_accuracy is not None:
            raise FptError(
                f"--target-accuracy is for classifiers; {self.task} is a forecast: stop it with --target-mse"
            )
        if not task.spec.regression and self.target_mse is not None:
            raise FptError(
                f"--target-mse is for forecasts; {self.task} is a classifier: stop it with --target-accuracy"
            )
        if self.epochs is not None and not training_examples(task):
            raise FptError(f"--epochs: {task.name} draws fresh examples every step, so it has no epochs; give --steps")
        if self.keep_best and task.eval_split in task.test_splits:
            raise FptError(
                f"--keep-best picks its step on the split training watches, which is {task.name}'s test split "
                "here; hold out a validation split (--val-size N) first"
            )

    def _check_names(self) -> None:
        """Names, through each one's own lookup, so a typo fails before a backbone is loaded."""
        from fpt.backbones import check_init
        from fpt.backbones.control_bodies import check_body
        from fpt.backbones.surgery import check_attention, check_precision
        from fpt.models.policy import parse_policy

        parse_policy(self.policy)
        check_body(self.body, self.layers, self.policy)
        check_init(self.init)
        if self.pooling is not None:
            check_choice("pooling", self.pooling, POOLINGS)
        check_attention(self.attention)
        check_precision(self.precision, self.body, self.compile)
        check_choice("model", self.model, MODELS)
        defaults = {field.name: field.default for field in dataclasses.fields(self)}
        # a baseline's auto is recorded as fp32, what it computes in (and the default before auto)
        neutral = {k: (defaults[k], False, "fp32" if k == "precision" else False) for k in TRANSFORMER_ONLY_OPTIONS}
        if self.model != "fpt" and any(getattr(self, k) not in neutral[k] for k in TRANSFORMER_ONLY_OPTIONS):
            flags = ", ".join(f"--{k}" for k in TRANSFORMER_ONLY_OPTIONS)
            raise FptError(f"{flags} apply to transformer models, not --model {self.model}")

    @classmethod
    def from_recipe(cls, recipe: str = "paper", **options) -> "TrainConfig":
        """A config whose options not given come from the named recipe, then from the defaults
        (the way to use a recipe from Python: TrainConfig(recipe=...) only records the name).
        A baseline model takes none of the recipe's transformer-only options (e.g. bf16), and
        neither it nor a policy or a control body that trains attention or feed-forward weights
        takes its dropout."""
        from fpt.models.policy import parse_policy

        defaults = recipe_defaults(recipe)
        baseline = options.get("model", "fpt") != "fpt"
        if baseline:
            defaults = {k: v for k, v in defaults.items() if k not in TRANSFORMER_ONLY_OPTIONS}
        policy = options.get("policy", "fpt")  # a wrong type is refused by validate, in one line
        trains_layers = options.get("body", BACKBONE) in ("attention", "block")
        if baseline or trains_layers or (isinstance(policy, str) and parse_policy(policy) & _BODY_GROUPS):
            defaults = {k: v for k, v in defaults.items() if k not in _FROZEN_BODY_ONLY}
        return cls(**{**defaults, **options, "recipe": recipe})

    @classmethod
    def from_dict(cls, data: dict, where: str = "config") -> "TrainConfig":
        """A config from JSON-like data, every key known and every value of its field's type. A
        config written before --device existed ran on the CPU, and resumes there."""
        if not isinstance(data, dict):
            raise FptError(f"{where}: a config is a mapping of option names to values, not a {type(data).__name__}")
        data = {"device": "cpu", **data}
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise FptError(f"{where}: unknown keys {', '.join(unknown)}")
        from fpt.tasks import check_task_option_types

        for key, value in data.items():
            check_option_type(key, value, where)
        check_task_option_types(data.get("task_options", {}), f"{where}: task_options")
        return cls(**data)


def _field_types() -> dict[str, tuple[type, ...]]:
    """Field name -> the Python types its value may have (from the annotations: "int | None" ...)."""
    kinds = {
        "int": (int,),
        "float": (int, float),
        "str": (str,),
        "bool": (bool,),
        "dict": (dict,),
        "None": (type(None),),
    }
    return {
        f.name: tuple(t for part in f.type.split("|") for t in kinds[part.strip()])
        for f in dataclasses.fields(TrainConfig)
    }


_FIELD_TYPES = _field_types()


def check_choice(option: str, value, choices) -> None:
    """Refuse a `value` of --OPTION that is not one of `choices`, naming them."""
    if value not in choices:
        raise FptError(f"unknown --{option.replace('_', '-')} {quoted(value)}; choose one of {', '.join(choices)}")


def check_run_options(
    threads: int | None, max_minutes: float | None, ddp_backend: str | None, device: str | None, nproc: int | None
) -> None:
    """The options of how `fpt train` runs, which a run's plan does not hold (--device and --threads beside
    --resume, which hold for one sitting), before anything is read or launched."""
    from fpt.training.distributed import check_backend, check_launch

    check_threads(threads)
    check_max_minutes(max_minutes)
    check_backend(ddp_backend, device)
    if device is not None:
        from fpt.core.devices import check_device_name

        check_device_name(device)
    if nproc is not None:
        check_launch(nproc)


def check_max_minutes(max_minutes: float | None) -> None:
    """--max-minutes unset or a positive finite number (checked before anything is built)."""
    if max_minutes is not None and not (max_minutes > 0 and math.isfinite(max_minutes)):
        raise FptError(f"--max-minutes must be a positive number, got {max_minutes}")


# what `fpt train --resume` takes besides the run's saved plan: --steps extends the run; --threads and --device
# hold for this sitting alone; so do the options of how it runs (--nproc, --max-minutes, tracking, progress)
RESUME_MAY_CHANGE = ("steps", "threads", "device")


def check_resume_options(given: list[str]) -> None:
    """Refuse, for --resume, the `fpt train` options given (by field name) that would change the saved plan."""
    changing = [f"--{name.replace('_', '-')}" for name in given if name not in RESUME_MAY_CHANGE]
    if changing:
        raise FptError(
            f"--resume continues a run with its saved config; drop {', '.join(changing)} "
            "(only --steps may change, to extend the run)"
        )


def check_resume_steps(steps: int | None, plan: TrainConfig | None = None, at_step: int | None = None) -> None:
    """--steps of a resume: at least 1; once the run's `plan` is read, only where its rate does not depend on its
    length (a constant one); once its checkpoint is, not before the step `at_step` it is at."""
    if steps is None:
        return
    if steps < 1:
        raise FptError(f"--steps must be at least 1, got {steps}")
    if plan is not None and steps != plan.steps and plan.lr_schedule != "constant":
        raise FptError(
            f"this run's {plan.lr_schedule} schedule decays to 0 at step {plan.steps}; --steps "
            f"{steps} would change its learning rate from here on; train a new run to that length"
        )
    if at_step is not None and steps < at_step:
        raise FptError(f"this run is at step {at_step:,}; --steps {steps} would end it before where it is")


MAX_THREADS = 1024  # torch takes a C int; more threads than any machine's cores is a typo


def check_threads(threads: int | None) -> None:
    """--threads unset (torch's default) or 1 to MAX_THREADS."""
    if threads is not None and not 1 <= threads <= MAX_THREADS:
        raise FptError(f"--threads must be 1 to {MAX_THREADS}, got {threads}")


def option_types(key: str) -> tuple[type, ...]:
    """The types a value of `fpt train` option or task option `key` may have."""
    if key in _FIELD_TYPES:
        return _FIELD_TYPES[key]
    from fpt.tasks import task_option_types

    return task_option_types(key)


def check_option_type(key: str, value, where: str) -> None:
    """Refuse a value of option `key` (read from `where`) that is not of the option's type."""
    check_type(value, option_types(key), f"{where}: {key}")


def coerce_option(key: str, value, where: str):
    """A value from YAML or the command line, as its option's type: "1e-3" is a float for --lr
    (YAML 1.1 reads exponents without a dot as text); anything else must already have the type."""
    allowed = option_types(key)
    if isinstance(value, str) and str not in allowed:
        for kind in (int, float):
            if kind in allowed:
                try:
                    value = kind(value)
                    break
                except ValueError:
                    continue
    check_option_type(key, value, where)
    return value
