"""TrainConfig: everything that defines a run, the single source of defaults for the CLI, sweeps
and config.json; `validate` checks numbers here and names through each one's own lookup."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from fpt.backbones import check_init
from fpt.backbones.controls import BACKBONE, check_body
from fpt.backbones.surgery import check_attention, check_dropout_rates, compute_dtype
from fpt.baselines import check_model
from fpt.devices import check_device_name
from fpt.errors import FptError, check_type
from fpt.model import check_pooling
from fpt.policy import parse_policy
from fpt.runtime import native_bf16
from fpt.tasks import check_task_option_types, task_option_types
from fpt.tasks.bucketing import check_bucket_window

# Options only transformer models take: refused for a baseline --model, and left out of a sweep's
# baseline cells when the sweep sets them for every cell.
TRANSFORMER_ONLY_OPTIONS = ("attention", "precision", "checkpointing", "compile", "body")


LR_SCHEDULES = ("constant", "cosine")

# Named sets of defaults. "paper": the paper's (Adam 1e-3, constant, clip 1, batch 16), what
# `fpt reproduce` uses. "fast": measured to reach the same accuracy in less wall
# time on our CPUs (benchmarks/converge.py, README "How the fast recipe was chosen"); the trained parameters
# are few, so they take a larger, decaying rate, and no dropout: a frozen body underfits, and
# dropout 0 scored 1.6-2.0 points higher on MNIST and Fashion-MNIST validation splits. bf16
# only where the CPU computes it natively.
RECIPES: dict[str, dict] = {
    "paper": {},
    "fast": {
        "lr": 3e-3,
        "lr_schedule": "cosine",
        "warmup_steps": 100,
        "batch_size": 32,
        "eval_subset": 2000,
        "precision": "native-bf16",
        "dropout": 0.0,
    },
}
# What a recipe sets only where the transformer's attention and feed-forward weights are all
# frozen, the regime it was measured in: a baseline, or a policy that trains body weights, keeps
# the default dropout.
_FROZEN_BODY_ONLY = ("dropout",)
_BODY_GROUPS = frozenset({"attention", "last-attention", "feedforward"})


def recipe_defaults(recipe: str) -> dict:
    """The options a recipe sets, as values for this machine (bf16 where it is native, else fp32)."""
    if recipe not in RECIPES:
        raise FptError(f"unknown --recipe {recipe!r}; choose {' or '.join(RECIPES)}")
    values = dict(RECIPES[recipe])
    if values.get("precision") == "native-bf16":
        values["precision"] = "bf16" if native_bf16() else "fp32"
    return values


@dataclass
class TrainConfig:
    """Everything that defines a run; saved as config.json and enough to rebuild it."""

    task: str = "bit-xor"
    task_options: dict = field(default_factory=dict)  # e.g. {"n_bits": 1000, "patch_size": 50}
    train_fraction: float | None = None  # train on the first fraction of a dataset's training split (few-shot)
    model: str = "fpt"  # fpt (a frozen backbone) | lstm | lstm* | cnn | cnn-matched (fully trained baselines)
    backbone: str = "minilm"
    init: str = "pretrained"  # pretrained | random | stats
    policy: str = "fpt"  # a policy name or a comma list of groups
    # backbone | none | attention | block: the blocks, or a control in their place (fpt.backbones.controls)
    body: str = "backbone"
    layers: int | None = None  # keep only the first K transformer blocks
    pooling: str | None = (
        None  # last (the paper's last-k tokens) | mean | flatten (None: the task's, see fpt.model.default_pooling)
    )
    attention: str | None = None  # causal | bidirectional (None: as pretrained: BERT both ways, GPT-2 and Llama causal)
    extra_positions: bool = False  # a learned position table in the embedder (for RoPE backbones)
    dropout: float = 0.1
    attention_dropout: float | None = (
        None  # on attention probabilities (None: --dropout); 0 is much faster on long inputs
    )
    steps: int = 2000
    batch_size: int = 16
    micro_batch_size: int | None = None  # split each batch to bound memory; same gradients up to dropout masks
    lr: float = 1e-3
    grad_clip: float = 1.0
    eval_every: int = 100
    eval_batch_size: int = 256
    target_accuracy: float | None = None  # stop once held-out accuracy reaches this
    target_mse: float | None = None  # a regression task (forecast): stop once held-out MSE is at most this
    seed: int = 0
    # The learning-rate schedule (a function of the step alone: a resumed run needs no extra state)
    lr_schedule: str = "constant"  # constant (the paper's) | cosine (decays to 0 at --steps)
    warmup_steps: int = 0  # the rate rises linearly from lr/warmup to lr over these steps
    eval_subset: int | None = None  # evaluate the first N examples in between; the whole split at the end
    recipe: str = "paper"  # the named defaults (RECIPES) that filled the options not given
    # Speed (benchmarks/perf.py). Exact: checkpointing, bucket_window, threads; opt-in numerics: precision, compile.
    precision: str = "fp32"  # fp32 | bf16 (frozen weights in bfloat16, backbone under autocast)
    # recompute each block in backward: much less memory, ~1/3 more compute; None: on where attention
    # dropout meets long inputs (fpt.training.plan_memory), which also picks micro-batches there
    checkpointing: bool | None = None
    compile: bool = False  # torch.compile the backbone (eager where unavailable)
    bucket_window: int | None = None  # batch variable-length sequences of similar length, per window of N batches
    threads: int | None = None  # torch intra-op threads (default: one per core)
    device: str = "auto"  # auto (CUDA, else MPS, else CPU) | cpu | cuda | cuda:N | mps

    def validate(self, world_size: int = 1) -> None:
        """Check every value; `world_size`: the number of ranks the global batch is split among."""
        for key in ("steps", "batch_size", "eval_every", "eval_batch_size"):
            if getattr(self, key) < 1:
                raise FptError(f"--{key.replace('_', '-')} must be at least 1, got {getattr(self, key)}")
        if self.batch_size % world_size:
            raise FptError(
                f"--batch-size {self.batch_size} (the global batch) does not split evenly among "
                f"{world_size} processes; use a multiple of {world_size}"
            )
        if self.micro_batch_size is not None and not 1 <= self.micro_batch_size <= self.batch_size:
            raise FptError(f"--micro-batch-size must be between 1 and --batch-size ({self.batch_size})")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise FptError(f"--lr must be a positive number, got {self.lr}")
        check_dropout_rates(self.dropout, self.attention_dropout)
        if not self.grad_clip > 0:
            raise FptError(f"--grad-clip must be positive, got {self.grad_clip}")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise FptError(f"--target-accuracy is a fraction in (0, 1], got {self.target_accuracy}")
        if self.target_mse is not None and not (self.target_mse > 0 and math.isfinite(self.target_mse)):
            raise FptError(f"--target-mse must be a positive number, got {self.target_mse}")
        if self.train_fraction is not None and not 0 < self.train_fraction <= 1:
            raise FptError(f"--train-fraction is a fraction in (0, 1], got {self.train_fraction}")
        if not 0 <= self.seed < 2**63:
            raise FptError(f"--seed must be in 0..2^63-1, got {self.seed}")
        check_threads(self.threads)
        check_bucket_window(self.bucket_window)
        check_device_name(self.device)
        if self.lr_schedule not in LR_SCHEDULES:
            raise FptError(f"unknown --lr-schedule {self.lr_schedule!r}; choose {' or '.join(LR_SCHEDULES)}")
        if self.warmup_steps < 0 or (self.warmup_steps and self.warmup_steps >= self.steps):
            raise FptError(
                f"--warmup-steps must be at least 0 and below --steps ({self.steps}), got "
                f"{self.warmup_steps}" + (f" (from --recipe {self.recipe})" if self.recipe != "paper" else "")
            )
        if self.eval_subset is not None and self.eval_subset < 1:
            raise FptError(f"--eval-subset must be at least 1, got {self.eval_subset}")
        if self.recipe not in RECIPES:
            raise FptError(f"unknown --recipe {self.recipe!r}; choose {' or '.join(RECIPES)}")
        # Names, through each one's own lookup, so a typo fails before a backbone is loaded.
        parse_policy(self.policy)
        check_body(self.body)
        if self.body != BACKBONE and self.policy not in ("fpt", "full"):
            raise FptError(
                f"--body {self.body} trains every parameter it has (its layers are fresh); "
                f"--policy {self.policy} is for the backbone's own blocks: leave --policy unset"
            )
        if self.body != BACKBONE and self.layers is not None:
            raise FptError(
                f"--layers keeps some of the backbone's blocks; --body {self.body} replaces them all: "
                "leave --layers unset"
            )
        check_init(self.init)
        check_pooling(self.pooling)
        check_attention(self.attention)
        compute_dtype(self.precision)
        check_model(self.model)
        defaults = {field.name: field.default for field in dataclasses.fields(self)}
        if self.model != "fpt" and any(getattr(self, k) not in (defaults[k], False) for k in TRANSFORMER_ONLY_OPTIONS):
            flags = ", ".join(f"--{k}" for k in TRANSFORMER_ONLY_OPTIONS)
            raise FptError(f"{flags} apply to transformer models, not --model {self.model}")

    @classmethod
    def from_recipe(cls, recipe: str = "paper", **options) -> "TrainConfig":
        """A config whose options not given come from the named recipe, then from the defaults
        (the way to use a recipe from Python: TrainConfig(recipe=...) only records the name).
        A baseline model takes none of the recipe's transformer-only options (e.g. bf16), and
        neither it nor a policy or a control body that trains attention or feed-forward weights
        takes its dropout."""
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


MAX_THREADS = 1024  # torch takes a C int; more threads than any machine's cores is a typo


def check_threads(threads: int | None) -> None:
    if threads is not None and not 1 <= threads <= MAX_THREADS:
        raise FptError(f"--threads must be 1 to {MAX_THREADS}, got {threads}")


def option_types(key: str) -> tuple[type, ...]:
    """The types a value of `fpt train` option or task option `key` may have."""
    return _FIELD_TYPES[key] if key in _FIELD_TYPES else task_option_types(key)


def check_option_type(key: str, value, where: str) -> None:
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
