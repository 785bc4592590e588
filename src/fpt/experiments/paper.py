"""The paper's side of every comparison (Lu et al. 2021, from shared/PAPER.md): its figures, the
variants it compares (appendix D) and the tables `fpt reproduce` builds beside them."""

from __future__ import annotations

from typing import NamedTuple

from fpt.experiments.sweep_spec import Variants

TASK_COLUMNS = {  # task name -> the paper's column heading
    "bit-memory": "Bit Memory",
    "bit-xor": "XOR",
    "listops": "ListOps",
    "mnist": "MNIST",
    "fashion-mnist": "Fashion-MNIST",
    "cifar10": "CIFAR-10",
    "cifar10-lra": "C10 LRA",
    "remote-homology": "Homology",
}
TASK_ORDER = list(TASK_COLUMNS)
FEW_SHOT = " (few-shot: "  # a controls task trained on a share of its split: "mnist (few-shot: 10% of train)"


def task_heading(task: str) -> str:
    """A table's heading for a task: the paper's where it has one ("MNIST"), kept with the share of
    the training split a controls task's name may add ("MNIST (few-shot: 10% of train)")."""
    name, sep, rest = task.partition(FEW_SHOT)
    return TASK_COLUMNS.get(name, name) + sep + rest


_PAPER_ORDER = [t for t in TASK_ORDER if t != "fashion-mnist"]  # the paper has no Fashion-MNIST column


def _row(*values):
    return dict(zip(_PAPER_ORDER, values))


# Test accuracy in percent, from PAPER.md (Lu et al. 2021).
PAPER = {
    "table1": {
        "fpt": _row(100, 100, 38.4, 98.0, 72.1, 38.6, 12.7),
        "full": _row(100, 100, 38, 99.1, 70.3, 42, 9),
        "lstm": _row(60.9, 50.1, 17.1, 99.5, 73.6, 11.7, 12),
    },
    "table2": {
        "fpt": _row(100, 100, 38.4, 98.0, 68.2, 38.6, 12.7),
        "random": _row(75.8, 100, 34.3, 91.7, 61.7, 36.1, 9.3),
        "bit": _row(100, 100, 35.4, 97.8, 62.6, 36.7, 7.8),
        "vit": _row(100, 100, 37.4, 97.8, 72.5, 43.0, 7.5),
    },
    "table3": {
        "random": _row(75.8, 100, 34.3, 91.7, 61.7, 36.1, 9.3),
        "lstm-frozen": _row(50.9, 50.0, 16.8, 70.9, 34.4, 10.4, 6.6),
        "lstm*-frozen": _row(75.0, 50.0, 16.7, 92.5, 43.5, 10.6, 8.6),
    },
    "stats-init": {
        "fpt": _row(100, 100, 38.4, 98.0, 68.2, 38.6, 12.7),
        "stats": _row(100, 100, 37.4, 97.2, 56.5, 33.1, 11.0),
        "random": _row(75.8, 100, 34.3, 91.7, 61.7, 36.1, 9.3),
    },
    "table18": {
        "output-only": _row(76, 56, 15, 23, 25, 17, 2),
        "output+input": _row(98, 72, 17, 85, 53, 22, 8),
        "output+position": _row(93, 84, 35, 93, 38, 30, 8),
        "output+layernorm": _row(94, 98, 36, 96, 54, 39, 9),
    },
    "table20": {
        "random-output-only": _row(75, 50, 17, 25, 20, 11, 2),
        "random-output+input": _row(75, 51, 17, 28, 24, 16, 2),
        "random-output+position": _row(75, 59, 18, 34, 21, 12, 6),
        "random-output+layernorm": _row(75, 100, 35, 83, 46, 34, 9),
    },
}

PAPER["finetune-more"] = {
    "fpt": {"cifar10": 68.2},
    "fpt+feedforward": {"cifar10": 76.6},
    "fpt+last-attention": {"cifar10": 80.0},
}
# Table 12: ListOps, only the output layer trained, by depth; rows as `row_label` names them.
PAPER["table12"] = {
    "pretrained, 1 layer": {"listops": 12},
    "pretrained, 3 layers": {"listops": 18},
    "pretrained, 6 layers": {"listops": 33},
    "pretrained, 12 layers": {"listops": 33},
    "random, 12 layers": {"listops": 17},
    "random, 24 layers": {"listops": 17},
}
# Table 6: gradient steps to convergence, same batch size and learning rate; each model converges to
# its own plateau (Random on Bit Memory at 4e4 steps, to 75.8%). Ours: fpt.experiments.convergence.
PAPER_STEPS = {"fpt": _row(1e4, 5e2, 2e3, 5e3, 4e5, 3e5, 1e5), "random": _row(4e4, 2e4, 6e3, 2e4, 4e5, 6e5, 1e5)}
# The official code scored these tasks' validation split (PAPER.md, known defects); we report test.
PAPER_SCORED_VALIDATION = ("listops", "remote-homology")

# Learning rate of `finetune`, a fine-tune of every pretrained weight. Measured on Bit XOR (MiniLM,
# 600 steps, seed 0; benchmarks/results/finetune_lr/): 1e-3 stays at chance (Adam wrecks the
# pretrained weights, as it did on MNIST and Fashion-MNIST), 1e-4 reaches 100% at step 200 and
# 3e-5 at step 300.
FINETUNE_LR = 1e-4


# A variant is a named bundle of options (appendix D of the paper).
VARIANTS: dict[str, dict] = {
    "fpt": {"policy": "fpt", "init": "pretrained"},
    # the paper's Full: the same architecture trained from scratch, every weight (appendix D)
    "full": {"policy": "full", "init": "random"},
    # not in the paper: every pretrained weight fine-tuned, at a smaller learning rate
    "finetune": {"policy": "full", "init": "pretrained", "lr": FINETUNE_LR},
    "random": {"policy": "fpt", "init": "random"},
    "stats": {"policy": "fpt", "init": "stats"},
    "bit": {"policy": "fpt", "init": "bit"},  # needs `fpt export-backbone` of a Bit Memory run first
    "vit": {"policy": "fpt", "init": "pretrained", "backbone": "vit-base"},
    "lstm": {"model": "lstm"},
    "lstm*": {"model": "lstm*"},
    "lstm-frozen": {"model": "lstm-frozen"},
    "lstm*-frozen": {"model": "lstm*-frozen"},
    "cnn": {"model": "cnn"},
    "cnn-matched": {"model": "cnn-matched"},
    "output-only": {"policy": "output-only"},
    "output+input": {"policy": "output+input"},
    "output+position": {"policy": "output+position"},
    "output+layernorm": {"policy": "output+layernorm"},
    "random-output-only": {"policy": "output-only", "init": "random"},
    "random-output+input": {"policy": "output+input", "init": "random"},
    "random-output+position": {"policy": "output+position", "init": "random"},
    "random-output+layernorm": {"policy": "output+layernorm", "init": "random"},
    "fpt+feedforward": {"policy": "fpt+feedforward"},
    "fpt+last-attention": {"policy": "fpt+last-attention"},
    "linear": {"model": "linear"},  # DLinear (Zeng et al. 2023), a forecast's baseline
    # issue 32's controls (fpt.backbones.control_bodies): the blocks replaced, every parameter trained
    "none": {"body": "none"},  # Tan et al.'s "w/o LLM"
    "attention": {"body": "attention"},  # "LLM2Attn"
    "block": {"body": "block"},  # "LLM2Trsf"
}

# Options a variant takes on one task only: the paper's Full on CIFAR-10 is a 3-layer GPT-2 of width
# 768 (appendix D), so `full` keeps 3 blocks of the backbone's architecture there.
VARIANT_TASK_OPTIONS: dict[tuple[str, str], dict] = {("full", "cifar10"): {"layers": 3}}
# What a sweep's `variant` stands for in `fpt sweep` and `fpt reproduce`: the sweep engine has no variants of its own.
PAPER_VARIANTS = Variants(VARIANTS, VARIANT_TASK_OPTIONS)

ALL_TASKS = ["bit-memory", "bit-xor", "listops", "mnist", "fashion-mnist", "cifar10", "cifar10-lra", "remote-homology"]
IMAGE_TASKS = ["mnist", "fashion-mnist", "cifar10"]


class PaperTable(NamedTuple):
    """A table `fpt reproduce` builds beside the paper's."""

    grid: dict  # its runs; a value given as a dict is per variant (Table 12: each init its own depths)
    paper_table: str | None  # the key of its figures in PAPER; None: the paper has no such table
    row_key: str  # the grid key that names a row of the table
    # options of one task's runs (the UEA sets: the validation split carved from train); --set wins
    task_options: dict = {}


# --- Later papers' figures: the same recipe on time series (issue 31) -------------------------
# Test MSE / MAE on the scaled series, lower is better; published[(task, horizon)] -> {row: (source, mse, mae)}.
# horizon "avg" is the mean over horizons 96, 192, 336 and 720. One Fits All (Zhou et al., NeurIPS
# 2023), Table 3; per horizon, DLinear's from the DLinear paper (Zeng et al. 2023, look-back 336; they
# average to One Fits All's DLinear row).
FORECAST_HORIZONS = [96, 192, 336, 720]
PUBLISHED_FORECASTS: dict[tuple[str, object], dict[str, tuple[str, float, float]]] = {
    ("ett:ETTh1", "avg"): {
        "fpt": ("One Fits All GPT2(6)", 0.427, 0.426),
        "PatchTST": ("PatchTST, in One Fits All's Table 3", 0.413, 0.430),
        "linear": ("One Fits All DLinear", 0.423, 0.437),
    },
    ("ett:ETTh2", "avg"): {
        "fpt": ("One Fits All GPT2(6)", 0.346, 0.394),
        "PatchTST": ("PatchTST, in One Fits All's Table 3", 0.330, 0.379),
        "linear": ("One Fits All DLinear", 0.431, 0.447),
    },
    ("ett:ETTh1", 96): {"linear": ("DLinear paper", 0.375, 0.399)},
    ("ett:ETTh1", 192): {"linear": ("DLinear paper", 0.405, 0.416)},
    ("ett:ETTh1", 336): {"linear": ("DLinear paper", 0.439, 0.443)},
    ("ett:ETTh1", 720): {"linear": ("DLinear paper", 0.472, 0.490)},
    ("ett:ETTh2", 96): {"linear": ("DLinear paper", 0.289, 0.353)},
    ("ett:ETTh2", 192): {"linear": ("DLinear paper", 0.383, 0.418)},
    ("ett:ETTh2", 336): {"linear": ("DLinear paper", 0.448, 0.465)},
    ("ett:ETTh2", 720): {"linear": ("DLinear paper", 0.605, 0.551)},
}
PUBLISHED_ONLY_ROWS = ["PatchTST"]  # rows we do not run, shown with their published figures only
# Test accuracy in percent: One Fits All, Table 25 (GPT2(6)). BasicMotions: no figure quoted here.
# Not a clean test score: its classification script validates on the test files (--val_pattern TEST
# in Classification/scripts/*.sh) and reports the best of its 27 evaluations (src/main.py).
PUBLISHED_UEA: dict[str, dict[str, tuple[str, float]]] = {
    "ucr:JapaneseVowels": {"fpt": ("One Fits All GPT2(6)", 98.6)},
}
UEA_VAL_SIZES = {"ucr:JapaneseVowels": 50, "ucr:BasicMotions": 8}  # training series held out for validation


# --- Is the pretrained transformer doing anything? (issue 32) -----------------------------------
# fpt beside each control, every arm under the same recipe and budget: frozen random weights (the
# paper's Random), the same architecture trained from scratch (the paper's Full), and the blocks
# replaced by nothing, one attention layer or one block (Tan et al., NeurIPS 2024). `finetune` is
# left out: its own learning rate would make it the one arm with another recipe.
# (in the order they run: `full`, which trains every weight, is the slowest)
CONTROL_ARMS = ["fpt", "random", "none", "attention", "block", "full"]
CONTROLS_TITLE = "Is the pretrained transformer doing anything?"  # the controls table's and its picture's title
CONTROL_TASKS = ["bit-xor", "bit-memory", "mnist", "fashion-mnist", "ucr:JapaneseVowels", "listops", "ett:ETTh1"]
# options of a controls task's runs: JapaneseVowels raw (no z-normalisation), ETTh1 at horizon 96
CONTROL_TASK_OPTIONS = {"ucr:JapaneseVowels": {"val_size": 50, "znorm": False}, "ett:ETTh1": {"horizon": 96}}

# --- Forecasting competitions (issue 60): fpt and its controls on collections of series -----------
# Each subset is a task (--task m3:monthly); the arms are the controls', trained under the fast recipe
# (benchmarks/m3_fpt.py's protocol) beside statsforecast's baselines, which one cell per subset scores.
COMPETITION_SUBSETS = {
    "m3": ["yearly", "quarterly", "monthly", "other"],
    "tourism": ["yearly", "quarterly", "monthly"],
}
COLLECTION_TABLES = tuple(COMPETITION_SUBSETS)  # `fpt reproduce m3`, `fpt reproduce tourism`
# Published figures on the competition's own test split: {competition: {metric: [(source, {column: value})]}};
# column "all" is every series of the competition. M3 sMAPE (%), averaged over each subset's horizons:
# Theta, the M3 winner, from Makridakis & Hibon (2000), "The M3-Competition: results, conclusions and
# implications", IJF 16(4), Tables 10-13 and 6 (as benchmarks/m3_baselines.py quotes them); its "all"
# weighs each forecast value once. N-BEATS: its M3 average as issue 60 quotes it (Oreshkin et al., ICLR
# 2020). No Tourism figure is quoted: none is in this repository or issue 60 to cite.
PUBLISHED_COMPETITIONS: dict[str, dict[str, list[tuple[str, dict[str, float]]]]] = {
    "m3": {
        "smape": [
            (
                "Theta, published (Makridakis & Hibon 2000)",
                {"yearly": 16.90, "quarterly": 8.96, "monthly": 13.85, "other": 4.41, "all": 13.01},
            ),
            ("N-BEATS, published (Oreshkin et al. 2020)", {"all": 12.37}),
        ]
    },
    "tourism": {},
}

# --- Is it any good on my data? (issue 57) -------------------------------------------------------
# Every UCR/UEA classification set sktime bundles (fpt.data.ts.ucr_datasets(); a test holds this list to
# it), each with the training series held out as validation: about a fifth of them (at least 4, so that
# UnitTest's 20 keep 16 to train on), JapaneseVowels' and BasicMotions' as UEA_VAL_SIZES has them. The
# arms are fpt and the controls that ask whether its blocks help (frozen random ones, none at all); the
# trained-block controls are left out to keep 9 sets x 3 seeds within a CPU's afternoon. JapaneseVowels is
# read raw, not z-normalised per series (UCR_TASK_OPTIONS), as the controls and the UEA table read it.
UCR_SETS = {
    "ucr:ACSF1": 20,
    "ucr:ArrowHead": 7,
    "ucr:BasicMotions": UEA_VAL_SIZES["ucr:BasicMotions"],
    "ucr:GunPoint": 10,
    "ucr:ItalyPowerDemand": 13,
    "ucr:JapaneseVowels": UEA_VAL_SIZES["ucr:JapaneseVowels"],
    "ucr:OSULeaf": 40,
    "ucr:PLAID": 107,
    "ucr:UnitTest": 4,
}
UCR_ARMS = ["fpt", "random", "none"]
UCR_TASK_OPTIONS = {
    task: {"val_size": size, **({"znorm": False} if task == "ucr:JapaneseVowels" else {})}
    for task, size in UCR_SETS.items()
}

REPRODUCIBLE: dict[str, PaperTable] = {
    "table1": PaperTable({"task": ALL_TASKS, "variant": ["fpt", "full", "lstm", "finetune"]}, "table1", "variant"),
    "table2": PaperTable({"task": ALL_TASKS, "variant": ["fpt", "random", "bit", "vit"]}, "table2", "variant"),
    "table3": PaperTable(
        {"task": ALL_TASKS, "variant": ["random", "lstm-frozen", "lstm*-frozen"]}, "table3", "variant"
    ),
    "table6": PaperTable({"task": ALL_TASKS, "variant": ["fpt", "random"]}, "table6", "variant"),
    "stats-init": PaperTable({"task": ALL_TASKS, "variant": ["fpt", "stats", "random"]}, "stats-init", "variant"),
    "table18": PaperTable(
        {"task": ALL_TASKS, "variant": ["output-only", "output+input", "output+position", "output+layernorm"]},
        "table18",
        "variant",
    ),
    "table20": PaperTable(
        {
            "task": ALL_TASKS,
            "variant": [
                "random-output-only",
                "random-output+input",
                "random-output+position",
                "random-output+layernorm",
            ],
        },
        "table20",
        "variant",
    ),
    "table12": PaperTable(
        {
            "task": ["listops"],
            "variant": ["output-only", "random-output-only"],
            "layers": {"output-only": [1, 3, 6, 12], "random-output-only": [12, 24]},
        },
        "table12",
        "layers",
    ),
    "finetune-more": PaperTable(
        {"task": ["cifar10"], "variant": ["fpt", "fpt+feedforward", "fpt+last-attention"]}, "finetune-more", "variant"
    ),
    "cnn": PaperTable({"task": IMAGE_TASKS, "variant": ["fpt", "cnn", "cnn-matched"]}, None, "variant"),
    # issue 31: the recipe on time series, beside One Fits All's figures (PUBLISHED_FORECASTS,
    # PUBLISHED_UEA); a forecast's horizon is an axis of each task's runs (--set horizon=H: that one)
    "forecasting": PaperTable(
        {"task": ["ett:ETTh1", "ett:ETTh2"], "variant": ["fpt", "random", "linear"], "horizon": FORECAST_HORIZONS},
        "forecasting",
        "variant",
    ),
    "uea": PaperTable(
        {"task": list(UEA_VAL_SIZES), "variant": ["fpt", "random"]},
        "uea",
        "variant",
        {task: {"val_size": size} for task, size in UEA_VAL_SIZES.items()},
    ),
    # issue 60: fpt and its controls on each subset of a competition, beside statsforecast's baselines
    # (fpt.experiments.competition_tables writes the tables; reproduce.Reproduction sets the recipe)
    **{
        name: PaperTable({"task": [f"{name}:{s}" for s in subsets], "variant": CONTROL_ARMS}, None, "variant")
        for name, subsets in COMPETITION_SUBSETS.items()
    },
    # issue 57: fpt and two controls on every set sktime bundles, beside MiniRocket and 1-NN DTW
    # (fpt.experiments.ucr_tables writes the table and sets the recipe)
    "ucr": PaperTable(
        {"task": list(UCR_SETS), "variant": UCR_ARMS},
        None,
        "variant",
        UCR_TASK_OPTIONS,
    ),
    # issue 32: fpt beside its controls (fpt.experiments.controls writes the table)
    "controls": PaperTable({"task": CONTROL_TASKS, "variant": CONTROL_ARMS}, None, "variant", CONTROL_TASK_OPTIONS),
}
# Tables drawn from later papers' figures (fpt.experiments.published_tables), not PAPER's.
PUBLISHED_TABLES = ("forecasting", "uea")


def row_label(table: str, values: dict) -> str:
    """The row a run sits in: its variant, or for Table 12 its init and depth ("random, 12 layers")."""
    row_key = REPRODUCIBLE[table].row_key
    if row_key == "variant":
        return str(values["variant"])
    if table == "table12":
        init = "random" if VARIANTS[values["variant"]].get("init") == "random" else "pretrained"
        layers = int(values["layers"])
        return f"{init}, {layers} layer{'' if layers == 1 else 's'}"
    return str(values.get(row_key))
