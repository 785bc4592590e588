"""The `fpt` parsers. The `fpt train` options are generated from TrainConfig's fields (their help
and choices are written once, in fpt.training.config), the task options from fpt.tasks.TASK_OPTIONS; a
usage mistake is one line, and no option may be abbreviated (`--npro 2` is not `--nproc 2`)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

# light modules only: --help and a usage error import neither torch nor transformers (issue 59;
# tests/cli/test_startup.py); TASK_OPTIONS is the task registry's own table, filled as tasks register
from fpt import __version__
from fpt.core.choices import DEVICE_CHOICES, TASK_OPTIONS
from fpt.core.errors import FptError
from fpt.experiments.paper import CONTROLS_TITLE, REPRODUCIBLE
from fpt.training.config import TrainConfig


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line, as every other fpt error, and no abbreviations:
    a prefix such as `--npro` would otherwise pass for `--nproc` here and reach torchrun unread."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        """argparse's complaint as one FptError line (exit status 2, no usage block), naming --help."""
        raise FptError(f"{message} (see `{self.prog} --help`)")


_KINDS = {"int": int, "float": float, "str": str}


def option_help(field: dataclasses.Field) -> str:
    """A TrainConfig field's help: its choices, what it does, its default."""
    choices = field.metadata["choices"]
    choices = choices() if callable(choices) else choices
    if isinstance(choices, dict):
        names = "; ".join(f"{name}: {what}" for name, what in choices.items())
    else:
        names = " | ".join(choices or ())
    text = "; ".join(part for part in (names, field.metadata["help"]) if part)
    default = None if field.default is dataclasses.MISSING else field.default
    return text if default is None else f"{text} (default: {default})"


def add_config_options(parser: argparse.ArgumentParser, group: str) -> None:
    """The TrainConfig fields of `group` as options; one left unset keeps TrainConfig's default
    (or the recipe's)."""
    for field in dataclasses.fields(TrainConfig):
        if field.metadata.get("group") != group:
            continue
        kinds = [kind.strip() for kind in field.type.split("|") if kind.strip() != "None"]
        flag = dict(action=argparse.BooleanOptionalAction) if kinds == ["bool"] else dict(type=_KINDS[kinds[0]])
        parser.add_argument(
            f"--{field.name.replace('_', '-')}", dest=field.name, default=None, help=option_help(field), **flag
        )


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser, "model")
    parser.add_argument(
        "--train",
        dest="train_groups",
        metavar="GROUPS",
        help="explicit trained groups, e.g. input,output,layernorm,feedforward (overrides --policy)",
    )
    for name, (kind, help_text) in TASK_OPTIONS.items():
        flag = dict(action=argparse.BooleanOptionalAction) if kind is bool else dict(type=kind)
        parser.add_argument(
            f"--{name.replace('_', '-')}", dest=name, default=None, help=f"{help_text} (default: the task's)", **flag
        )


def _add_executor_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: runs on this machine, the spec's parallel at a time; ray: each run a Ray task "
        "(the sweep folder on a filesystem every node shares) (default: local)",
    )
    parser.add_argument("--ray-address", help="a running Ray cluster, e.g. auto (default: start Ray on this machine)")
    parser.add_argument("--cpus-per-run", type=int, help="Ray: CPUs (torch threads) per run (default: 1)")
    parser.add_argument("--gpus-per-run", type=float, help="Ray: GPUs per run, fractions share one (default: 0)")


def _add_tracking_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--report-to",
        metavar="LIST",
        help="also send parameters, evaluations and results to "
        "these trackers: a comma list of mlflow, tensorboard, wandb (default: none; "
        "metrics.jsonl is always written)",
    )
    parser.add_argument(
        "--tracking-uri",
        metavar="URI",
        help="the MLflow store, e.g. sqlite:///mlflow.db or "
        "http://host:5000 (default: $MLFLOW_TRACKING_URI, else MLflow's own)",
    )
    parser.add_argument(
        "--experiment",
        metavar="NAME",
        help="the MLflow experiment and W&B project (default: $MLFLOW_EXPERIMENT_NAME, $WANDB_PROJECT, else fpt)",
    )


def tracker_from_args(args: argparse.Namespace, parent: str | None = None):
    """The trackers of --report-to, each package imported now: a missing one stops before any work."""
    from fpt.tracking import build_tracker

    return build_tracker(args.report_to, args.tracking_uri, args.experiment, parent)


PROGRESS_HELP = "a progress bar on stderr (default: when stderr is a terminal)"


def build_parser() -> argparse.ArgumentParser:
    """The `fpt` parser with every subcommand; train's options are generated from TrainConfig's fields."""
    parser = Parser(
        prog="fpt",
        description="Frozen Pretrained Transformers: train only the input, "
        "output, layer norms and positions of a language-pretrained transformer.",
    )
    parser.add_argument("--version", action="version", version=f"fpt {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    try:
        _add_train(commands)
        _add_run_commands(commands)
        _add_data_and_report(commands)
        _add_sweep_commands(commands)
        _add_table_commands(commands)
    except argparse.ArgumentError as exc:  # a plugin task's parameter named like an fpt flag (--steps, --out, ...)
        raise FptError(
            f"task option {exc.argument_name.lstrip('-').replace('-', '_')!r} (a parameter of a registered task) "
            f"is named like the fpt option {exc.argument_name}; rename the task's parameter"
        ) from None
    return parser


def _add_train(commands) -> None:
    train = commands.add_parser("train", help="train a model on a task; prints held-out accuracy and the run directory")
    _add_model_options(train)
    add_config_options(train, "train")
    train.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="any train options as YAML (names with underscores), or as JSON (FILE.json), a run's config.json "
        "included; flags given here override it",
    )
    train.add_argument("--out", type=Path, help="run directory (default: runs/<task>-<backbone>-<time>)")
    train.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue this run from its checkpoint")
    train.add_argument("--progress", action=argparse.BooleanOptionalAction, help=PROGRESS_HELP)
    train.add_argument(
        "--max-minutes",
        type=float,
        metavar="M",
        help="stop after the step under way once M minutes of this sitting have passed, with a checkpoint "
        "(exit 0); `--resume` continues it (default: no limit)",
    )
    train.add_argument(
        "--nproc",
        type=int,
        metavar="N",
        help="train one run on N processes (data parallel): "
        "the same as `torchrun --standalone --nproc-per-node N -m fpt train ...`",
    )
    train.add_argument(
        "--ddp-backend",
        metavar="gloo|nccl",
        help="torch.distributed backend under torchrun (default: gloo for CPU tensors, nccl for CUDA)",
    )
    _add_tracking_options(train)
    info = commands.add_parser("info", help="parameter groups: counts, trained or frozen, percent")
    _add_model_options(info)


def _device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", help="compute on this device instead of the run's own (" + DEVICE_CHOICES + ")")


def _add_run_commands(commands) -> None:
    """The commands that read a run directory."""
    evaluate = commands.add_parser("evaluate", help="reload a run and report its held-out accuracy")
    evaluate.add_argument("run_dir", type=Path)
    _device_option(evaluate)
    evaluate.add_argument(
        "--splits",
        default="all",
        help="all | test (the task's test split and test holdouts) | a comma list of split names (default: all)",
    )
    evaluate.add_argument("--threads", type=int, help="torch threads (default: all cores)")
    evaluate.add_argument(
        "--shuffle",
        metavar="tokens",
        help="also score each split with every input's order "
        "shuffled (a seeded permutation of its real tokens, padding in place; a forecast's window "
        "time steps, before patching), beside the ordered score",
    )
    evaluate.add_argument("--shuffle-seed", type=int, help="the shuffle's seed (default: 0)")

    _add_backtest(commands)

    attention = commands.add_parser("attention", help="PNG of a run's mean attention over heads")
    attention.add_argument("run_dir", type=Path)
    _device_option(attention)
    attention.add_argument("--layer", type=int, default=0)
    attention.add_argument("--examples", type=int, default=64, help="held-out inputs to average over")
    attention.add_argument("--out", type=Path, help="PNG path (default: RUN_DIR/attention_layer<L>.png)")

    export = commands.add_parser("export-backbone", help="save a run's trained backbone body (e.g. for --init bit)")
    export.add_argument("run_dir", type=Path)
    _device_option(export)
    export.add_argument(
        "--out",
        type=Path,
        help="safetensors path (default for a Bit Memory run from random "
        "init with every weight trained: where --init bit looks)",
    )
    _add_export_and_predict(commands)


def _add_backtest(commands) -> None:
    backtest = commands.add_parser(
        "backtest",
        help="a forecasting run's recipe retrained and scored at N origins rolling back from the end, "
        "beside the baselines at each (series collections: m1, m3, tourism, panel)",
    )
    backtest.add_argument("run_dir", type=Path)
    backtest.add_argument(
        "--origins",
        type=int,
        required=True,
        metavar="N",
        help="forecast origins: 1 is the run's own test split, k cuts (k-1) x STEP observations off every series",
    )
    backtest.add_argument("--step", type=int, metavar="S", help="observations between origins (default: the horizon)")
    backtest.add_argument("--progress", action=argparse.BooleanOptionalAction, help=PROGRESS_HELP)
    _device_option(backtest)


def _add_export_and_predict(commands) -> None:
    export_run = commands.add_parser(
        "export", help="write a trained run as a PEFT adapter or a Hugging Face-style directory"
    )
    export_run.add_argument("run_dir", type=Path)
    export_run.add_argument(
        "--format",
        required=True,
        help="peft (a layer-norm-tuning adapter for the base model, "
        "plus fpt's input layer and head) | hf (the whole model, for "
        "FrozenPretrainedTransformer.from_pretrained and `fpt predict`)",
    )
    export_run.add_argument("--out", type=Path, required=True, help="a new (or empty) directory")

    predict = commands.add_parser("predict", help="a trained run's predictions on new inputs, in input order")
    predict.add_argument("run_dir", type=Path, help="a run directory, or a directory `fpt export --format hf` wrote")
    predict.add_argument(
        "--input",
        type=Path,
        required=True,
        help="an .npz with x (and optional mask, y), "
        "IDX images, a ListOps .tsv or a TAPE .json, as the run's task reads them; for a "
        "forecast, an .npz of windows (x, optional y) or a .csv series to continue",
    )
    predict.add_argument(
        "--out",
        type=Path,
        help="predictions.csv, .jsonl or .npy "
        "(default: RUN_DIR/predictions-<input name>.csv, or .jsonl for several labels per example)",
    )
    predict.add_argument(
        "--force",
        action="store_true",
        help="replace an existing --out (never the input or the run's training data)",
    )
    predict.add_argument(
        "--level",
        type=_percent,
        nargs="+",
        metavar="LEVEL",
        help="a forecast's prediction intervals, in percent, as statsforecast's level: --level 50 90 99 writes "
        "columns fpt-lo-50, fpt-hi-50, ... (COLUMN-lo-50, ... for a .csv series), split conformal on the "
        "run's validation split (default: 80 95, as the run recorded them)",
    )
    predict.add_argument("--batch-size", type=int, default=256)
    _device_option(predict)


def _percent(text: str) -> float:
    """One --level: a number (its range is checked with the run's, fpt.training.intervals.check_levels)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number: give levels in percent, separated by spaces, e.g. --level 80 95"
        ) from None


def _add_data_and_report(commands) -> None:
    commands.add_parser("backbones", help="list backbones, whether each loads here, how to get it")
    data = commands.add_parser("data", help="get a dataset into the folder its task reads by default")
    data_commands = data.add_subparsers(dest="data_command", required=True, parser_class=Parser)
    get = data_commands.add_parser("get", help="fetch (or generate) a dataset; prints the folder to read")
    get.add_argument("name", help="mnist | fashion-mnist | cifar10 | listops | remote-homology | ett")
    get.add_argument(
        "--dest",
        type=Path,
        help="folder to fill (default: the fpt cache's data/NAME, where tasks look without --data-dir)",
    )
    report = commands.add_parser("report", help="a self-contained HTML page for a run or a sweep")
    report.add_argument("directory", type=Path)
    report.add_argument("--out", type=Path, help="HTML path (default: DIRECTORY/report.html)")


def _add_sweep_commands(commands) -> None:
    sweep = commands.add_parser("sweep", help="run a grid of runs from a YAML spec (resumable)")
    sweep.add_argument("spec", type=Path)
    sweep.add_argument("--out", type=Path, help="sweep directory (default: runs/sweep-<spec name>)")
    sweep.add_argument("--progress", action=argparse.BooleanOptionalAction, help=PROGRESS_HELP)
    sweep.add_argument(
        "--max-minutes",
        type=float,
        metavar="M",
        help="each cell at most M minutes this sitting, stopped with a checkpoint; the same command continues "
        "it (default: the spec's max_minutes, else no limit)",
    )
    _add_executor_options(sweep)
    _add_tracking_options(sweep)

    reproduce = commands.add_parser("reproduce", help="ready-made sweeps beside the paper's tables")
    reproduce.add_argument(
        "table", help="a comma list of " + " | ".join(REPRODUCIBLE) + "; runs shared between tables are made once"
    )
    reproduce.add_argument("--tasks", help="comma list: only these of the table's tasks")
    reproduce.add_argument("--budget", type=int, default=500, help="training steps per run (default: 500)")
    reproduce.add_argument("--backbone", default="minilm")
    reproduce.add_argument("--seeds", type=int, default=3)
    reproduce.add_argument(
        "--parallel",
        type=int,
        default=1,
        help="runs at once (the cores, or OMP_NUM_THREADS where smaller, are split between them)",
    )
    reproduce.add_argument("--skip-variants", help="comma list of variants not to run; their cells say so")
    reproduce.add_argument(
        "--lr-search",
        action="append",
        metavar="ARM=RATE,RATE",
        help="controls: give ARM its own learning rate, the one of these with the best validation score "
        "on seed 0 (repeatable; e.g. full=1e-4,3e-4); the table says so",
    )
    reproduce.add_argument(
        "--budget-search",
        metavar="STEPS,STEPS",
        help="m3, tourism: give each subset the budget of these with the lowest validation sMAPE of its first "
        "arm's seed 0, in place of --budget (benchmarks/m3_fpt.py: 1000,3000); the table says so",
    )
    reproduce.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="an `fpt train` option for every run, e.g. --set precision=bf16 (repeatable); "
        "attention, precision, checkpointing and compile reach transformer rows only",
    )
    reproduce.add_argument("--out", type=Path, help="sweep directory (default: runs/reproduce-<table>)")
    reproduce.add_argument("--progress", action=argparse.BooleanOptionalAction, help=PROGRESS_HELP)
    _add_executor_options(reproduce)
    _add_tracking_options(reproduce)


def _add_table_commands(commands) -> None:
    """The tables of finished runs, rebuilt from their files, and a run scored on shuffled inputs."""
    controls = commands.add_parser("controls", help="the controls table (and picture) of `reproduce controls` runs")
    controls.add_argument("folder", type=Path, help="a folder holding `fpt reproduce controls` runs (searched deeply)")
    controls.add_argument("--out", type=Path, help="write the Markdown here (default: print it)")
    controls.add_argument("--title", default=CONTROLS_TITLE, help="the table's title")
    controls.add_argument("--note", default="", help="a sentence on where it ran, added to the table's note")
    controls.add_argument("--chart", type=Path, help="also draw the table as a picture here (PNG)")
    competitions = commands.add_parser("competitions", help="the m3 or tourism tables of `reproduce m3` runs")
    competitions.add_argument("folder", type=Path, help="a folder holding `fpt reproduce m3` runs (searched deeply)")
    competitions.add_argument("--out", type=Path, help="write the Markdown here (default: print it)")
    shuffled = commands.add_parser("shuffled", help="score a finished run's test split on shuffled inputs")
    shuffled.add_argument("run_dir", type=Path, help="a finished run's folder, with its checkpoint")
    shuffled.add_argument("--seed", type=int, help="the shuffle's seed (default: the one the controls table used)")
