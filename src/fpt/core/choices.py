"""The names the command line offers, as plain data: the tasks and their options, models, inits,
bodies, policies, poolings, attentions, precisions and devices. They live here, below everything
that needs torch, so that `fpt --help`, a usage error and the option parser generated from
TrainConfig import neither torch nor transformers (issue 59: `fpt --help` took 2.5-3.0 s on two
busy cores, 1.3x a bare `import torch`). Each module that acts on a name imports it from here
(`fpt.backbones.catalog.INITS` is this INITS), so every list is written once.

The task names and options are the built-in tasks'; `fpt.tasks.registry` registers into these same
objects (`TASK_NAMES`, `TASK_OPTIONS`), so a task registered from Python is offered as well, and
tests/tasks/test_tasks.py checks that the built-in tasks' signatures give exactly this table.
"""

from __future__ import annotations

DEVICE_CHOICES = "auto | cpu | cuda | cuda:N | mps"

INITS = ("pretrained", "random", "stats", "bit")

BACKBONE = "backbone"
BODIES = {
    BACKBONE: "the backbone's own blocks (fpt)",
    "none": "nothing between the input layer and the head but the positions (Tan et al.'s w/o LLM)",
    "attention": "one freshly initialised self-attention layer of the backbone's width and heads (LLM2Attn)",
    "block": "one freshly initialised block of the backbone's own architecture (LLM2Trsf)",
}

CAUSAL, BIDIRECTIONAL = "causal", "bidirectional"
ATTENTIONS = (CAUSAL, BIDIRECTIONAL)

# auto: a precision picked for the device before the model is built (fpt.backbones.surgery.auto_precision);
# the others are fpt.backbones.surgery.PRECISIONS' names, in its order
AUTO = "auto"
PRECISION_CHOICES = (AUTO, "fp32", "bf16", "fp16", "int8", "int8-bf16")

POOLINGS = ("last", "mean", "flatten")

# "fpt": no baseline, a frozen transformer. "-frozen": the LSTM layers kept at their random init and
# only the input layer, positions and head trained (Table 3 of the paper). "linear": DLinear, for a forecast.
MODELS = ("fpt", "lstm", "lstm*", "lstm-frozen", "lstm*-frozen", "cnn", "cnn-matched", "linear")

GROUPS = ("input", "output", "layernorm", "position", "attention", "last-attention", "feedforward")
"""The seven groups every backbone parameter is put in; `last-attention` is the last block's attention,
so that it can be trained alone."""

POLICIES: dict[str, frozenset[str]] = {
    "fpt": frozenset({"input", "output", "layernorm", "position"}),
    "full": frozenset(GROUPS),
    "output-only": frozenset({"output"}),
    "output+input": frozenset({"output", "input"}),
    "output+position": frozenset({"output", "position"}),
    "output+layernorm": frozenset({"output", "layernorm"}),
    # "Finetuning more" (the paper's CIFAR-10 ablation)
    "fpt+feedforward": frozenset({"input", "output", "layernorm", "position", "feedforward"}),
    "fpt+last-attention": frozenset({"input", "output", "layernorm", "position", "feedforward", "last-attention"}),
}
"""The named policies (`--policy NAME`): each the set of groups it trains; every other group is frozen."""

BUILTIN_TASKS = (
    "bit-memory",
    "bit-xor",
    "cifar10",
    "cifar10-lra",
    "ett",
    "fashion-mnist",
    "forecast",
    "listops",
    "m1",
    "m3",
    "mnist",
    "npz",
    "panel",
    "remote-homology",
    "tourism",
    "ucr",
)

# Each built-in task option: its type (what the tasks' signatures say) and its help, written once, in
# the order `fpt train --help` lists them. A task registered later (a plugin) adds its own options.
BUILTIN_TASK_OPTIONS: dict[str, tuple[type, str]] = {
    "n_bits": (int, "bit tasks: bits per string"),
    "n_strings": (int, "bit-memory: strings to memorise"),
    "patch_size": (int, "values (bits, pixels, time steps) per token"),
    "mask_prob": (float, "bit-memory: share of bits masked in the query"),
    "eval_size": (int, "generated tasks: held-out examples"),
    "data_dir": (str, "folder holding the task's files (default: the fpt cache)"),
    "protocol": (str, "listops: lra | paper; cifar10-lra: paper | lra"),
    "max_len": (int, "longest sequence kept; longer ones are cut and counted"),
    "augment": (
        bool,
        "image augmentation on training batches (cifar10: on by default, the paper's; "
        "mnist: shifts; fashion-mnist: shifts and mirroring)",
    ),
    "test_path": (str, "npz: a second file used as the test split"),
    "heldout_fraction": (float, "npz without --test-path: share of the file held out"),
    "dataset": (
        str,
        "ucr: UCR/UEA dataset, bundled with sktime or NAME/ under --data-dir; ett: ETTh1 or ETTh2; "
        "m3: yearly, quarterly, monthly or other; m1, tourism: yearly, quarterly or monthly",
    ),
    "znorm": (bool, "ucr: z-normalise each series per channel"),
    "lookback": (
        int,
        "forecasts: time steps of input (ETTh: 336, One Fits All's; a CSV or a collection: chosen from the data "
        "where not given)",
    ),
    "horizon": (
        int,
        "forecasts: time steps predicted (the published tables: 96, 192, 336, 720); panel: required "
        "(m1, m3, tourism: the competition's own)",
    ),
    "patch_stride": (int, "forecasts: time steps between the starts of two patches (default 8)"),
    "date_column": (str, "forecast:FILE.csv: the column of dates (default: one named date, else the first)"),
    "columns": (str, "forecast:FILE.csv: the numeric columns to forecast, comma-separated (default: all)"),
    "id_column": (str, "panel:FILE: the column naming each series (default unique_id)"),
    "time_column": (str, "panel:FILE: the column of timestamps (default ds)"),
    "value_column": (str, "panel:FILE: the column of values (default y)"),
    "freq": (str, "panel:FILE: the series' pandas frequency (MS, QS, D, h; default: inferred)"),
    "cutoff": (
        int,
        "m1, m3, tourism, panel: drop every series' last C observations first (its test then the "
        "horizon before them; `fpt backtest` trains its earlier origins so)",
    ),
    "val_size": (
        int,
        "mnist, fashion-mnist, cifar10, ucr: hold out this many training examples as a 'val' split "
        "and evaluate on it while training (choose settings there, not on test)",
    ),
}

# The live tables, which fpt.tasks.registry fills in place as tasks register (the built-in ones
# change nothing here): the CLI and config read these without importing a task.
TASK_NAMES: set[str] = set(BUILTIN_TASKS)
TASK_OPTIONS: dict[str, tuple[type, str]] = dict(BUILTIN_TASK_OPTIONS)


def task_names() -> list[str]:
    """The task names `--task` takes, sorted: the built-in ones and any registered since."""
    return sorted(TASK_NAMES)
