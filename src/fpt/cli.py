"""The `fpt` command: argparse parsers (help texts generated from the registries) and one
`cmd_*` function per command; `COMMANDS` lists them all.

Every mistake a user can make ends in one line on stderr naming the fix, and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import traceback
from pathlib import Path
from typing import NoReturn

from fpt import __version__, distributed
from fpt.backbones import INITS
from fpt.backbones.controls import BODIES
from fpt.baselines import MODELS
from fpt.devices import DEVICE_CHOICES
from fpt.errors import FptError, StopRequested
from fpt.experiments.paper import REPRODUCIBLE
from fpt.policy import POLICIES
from fpt.tasks import TASK_OPTIONS, list_tasks


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line, as every other fpt error."""

    def error(self, message: str):
        raise FptError(f"{message} (see `{self.prog} --help`)")


def _default(name: str):
    from fpt.config import TrainConfig

    return next(f.default for f in dataclasses.fields(TrainConfig) if f.name == name)


def _add_config_option(parser: argparse.ArgumentParser, name: str, kind=None, help: str = "", **kwargs) -> None:
    """An option that fills a TrainConfig field; left unset it keeps TrainConfig's default."""
    parser.add_argument(
        f"--{name.replace('_', '-')}",
        dest=name,
        type=kind,
        default=None,
        help=f"{help} (default: {_default(name)})".strip(),
        **kwargs,
    )


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    _add_config_option(
        parser, "task", str, " | ".join(t for t in list_tasks() if t != "npz") + " | npz:PATH (your own arrays)"
    )
    _add_config_option(
        parser,
        "model",
        str,
        " | ".join(MODELS) + " (fpt: a frozen transformer; the others "
        "fully trained baselines: cnn for image tasks, cnn-matched sized to the FPT's trained count, "
        "-frozen: LSTM layers left at random init)",
    )
    _add_config_option(parser, "backbone", str, "registered name, local directory or hub id")
    _add_config_option(
        parser, "init", str, " | ".join(INITS) + " (bit: trained on Bit Memory, see `fpt export-backbone`)"
    )
    _add_config_option(parser, "policy", str, " | ".join(POLICIES))
    _add_config_option(
        parser,
        "body",
        str,
        "; ".join(f"{name}: {what}" for name, what in BODIES.items())
        + ". The controls keep the backbone's position table and train every parameter they have",
    )
    parser.add_argument(
        "--train",
        dest="train_groups",
        metavar="GROUPS",
        help="explicit trained groups, e.g. input,output,layernorm,feedforward (overrides --policy)",
    )
    _add_config_option(
        parser, "layers", int, "keep only the first K transformer blocks (--init random: build K, as many as asked)"
    )
    _add_config_option(
        parser,
        "pooling",
        str,
        "last (last-k tokens, the paper's) | mean | flatten (every token; the default for forecasts)",
    )
    _add_config_option(
        parser,
        "attention",
        str,
        "causal | bidirectional; unset: as pretrained (MiniLM/BERT "
        "bidirectional, GPT-2/Llama causal); causal masks an encoder as GPT-2 is, so only the last "
        "token sees the whole input",
    )
    _add_config_option(
        parser,
        "extra_positions",
        None,
        "add a learned position table (for RoPE backbones)",
        action=argparse.BooleanOptionalAction,
    )
    _add_config_option(parser, "dropout", float)
    _add_config_option(
        parser,
        "attention_dropout",
        float,
        "dropout on attention probabilities (unset: --dropout); "
        "0 lets CPU attention use its fused kernel, several times faster on long inputs such as ListOps",
    )
    _add_config_option(
        parser,
        "precision",
        str,
        "fp32 | bf16 (frozen weights in bfloat16, bf16 matmuls: "
        "about 2-3x faster on CPUs with AVX512-BF16/AMX and on GPUs, half the memory; changes "
        "numerics) | fp16 (CUDA only, with a loss scaler); trained weights and Adam stay fp32",
    )
    _add_config_option(
        parser,
        "checkpointing",
        None,
        "recompute each block in backward: same numbers, "
        "much less memory, about 1.4x step time; unset: on (with micro-batches) where attention "
        "dropout meets inputs of 512 tokens or more",
        action=argparse.BooleanOptionalAction,
    )
    _add_config_option(
        parser,
        "compile",
        None,
        "torch.compile the backbone (eager where unavailable)",
        action=argparse.BooleanOptionalAction,
    )
    _add_config_option(parser, "bucket_window", int, "batch sequences of similar length, per window of N batches")
    _add_config_option(
        parser,
        "train_fraction",
        float,
        "dataset tasks: train on the first fraction F of the training "
        "split, in its stored order (a forecast: the earliest windows), floor(F x N) examples; "
        "validation and test unchanged (few-shot: the published setting is 0.1)",
    )
    _add_config_option(parser, "seed", int)
    _add_config_option(parser, "device", str, DEVICE_CHOICES + " (auto: CUDA if there is one, else MPS, else the CPU)")
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


def _tracker(args: argparse.Namespace, parent: str | None = None):
    """The trackers of --report-to, each package imported now: a missing one stops before any work."""
    from fpt.tracking import build_tracker

    return build_tracker(args.report_to, args.tracking_uri, args.experiment, parent)


PROGRESS_HELP = "a progress bar on stderr (default: when stderr is a terminal)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fpt",
        description="Frozen Pretrained Transformers: train only the input, "
        "output, layer norms and positions of a language-pretrained transformer.",
    )
    parser.add_argument("--version", action="version", version=f"fpt {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = commands.add_parser("train", help="train a model on a task; prints held-out accuracy and the run directory")
    _add_model_options(train)
    _add_config_option(train, "steps", int)
    _add_config_option(train, "batch_size", int)
    _add_config_option(
        train,
        "micro_batch_size",
        int,
        "split each batch into micro-batches (less memory; the same gradients up to dropout masks)",
    )
    _add_config_option(
        train,
        "recipe",
        str,
        "paper (Adam 1e-3 constant, batch 16, dropout 0.1: the paper's) | fast "
        "(Adam 3e-3, warm-up then cosine, batch 32, bf16 where native, no dropout on a frozen body: "
        "measured to reach the same accuracy in less time; see the README); options given here win",
    )
    _add_config_option(train, "lr", float, "Adam learning rate")
    _add_config_option(train, "lr_schedule", str, "constant | cosine (to 0 at --steps, after --warmup-steps)")
    _add_config_option(train, "warmup_steps", int, "linear warm-up of the learning rate")
    _add_config_option(train, "grad_clip", float, "gradient-norm clip")
    _add_config_option(train, "eval_every", int, "evaluate and checkpoint every N steps")
    _add_config_option(train, "eval_batch_size", int)
    _add_config_option(
        train,
        "eval_subset",
        int,
        "evaluate the first N held-out examples in between (recorded as split[:N]); the whole split at the end",
    )
    _add_config_option(train, "target_accuracy", float, "stop once held-out accuracy reaches this fraction")
    _add_config_option(train, "target_mse", float, "a forecast: stop once held-out MSE is at most this")
    train.add_argument(
        "--config",
        type=Path,
        metavar="FILE.yaml",
        help="any train options as YAML (names with underscores); flags given here override it",
    )
    train.add_argument("--out", type=Path, help="run directory (default: runs/<task>-<backbone>-<time>)")
    train.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue this run from its checkpoint")
    train.add_argument("--threads", type=int, help="torch threads (default: all cores)")
    train.add_argument("--progress", action=argparse.BooleanOptionalAction, help=PROGRESS_HELP)
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

    evaluate = commands.add_parser("evaluate", help="reload a run and report its held-out accuracy")
    evaluate.add_argument("run_dir", type=Path)
    evaluate.add_argument("--device", help="compute on this device instead of the run's own (" + DEVICE_CHOICES + ")")
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

    info = commands.add_parser("info", help="parameter groups: counts, trained or frozen, percent")
    _add_model_options(info)

    commands.add_parser("backbones", help="list backbones, whether each loads here, how to get it")

    attention = commands.add_parser("attention", help="PNG of a run's mean attention over heads")
    attention.add_argument("run_dir", type=Path)
    attention.add_argument("--device", help="compute on this device instead of the run's own (" + DEVICE_CHOICES + ")")
    attention.add_argument("--layer", type=int, default=0)
    attention.add_argument("--examples", type=int, default=64, help="held-out inputs to average over")
    attention.add_argument("--out", type=Path, help="PNG path (default: RUN_DIR/attention_layer<L>.png)")

    data = commands.add_parser("data", help="get a dataset into the folder its task reads by default")
    data_commands = data.add_subparsers(dest="data_command", required=True, parser_class=_Parser)
    get = data_commands.add_parser("get", help="fetch (or generate) a dataset; prints the folder to read")
    get.add_argument("name", help="mnist | fashion-mnist | cifar10 | listops | remote-homology | ett")
    get.add_argument(
        "--dest",
        type=Path,
        help="folder to fill (default: the fpt cache's data/NAME, where tasks look without --data-dir)",
    )

    export = commands.add_parser("export-backbone", help="save a run's trained backbone body (e.g. for --init bit)")
    export.add_argument("run_dir", type=Path)
    export.add_argument("--device", help="compute on this device instead of the run's own (" + DEVICE_CHOICES + ")")
    export.add_argument(
        "--out",
        type=Path,
        help="safetensors path (default for a Bit Memory run from random "
        "init with every weight trained: where --init bit looks)",
    )

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
    predict.add_argument("--batch-size", type=int, default=256)
    predict.add_argument("--device", help="compute on this device instead of the run's own (" + DEVICE_CHOICES + ")")

    report = commands.add_parser("report", help="a self-contained HTML page for a run or a sweep")
    report.add_argument("directory", type=Path)
    report.add_argument("--out", type=Path, help="HTML path (default: DIRECTORY/report.html)")

    sweep = commands.add_parser("sweep", help="run a grid of runs from a YAML spec (resumable)")
    sweep.add_argument("spec", type=Path)
    sweep.add_argument("--out", type=Path, help="sweep directory (default: runs/sweep-<spec name>)")
    sweep.add_argument("--progress", action=argparse.BooleanOptionalAction, help=PROGRESS_HELP)
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
    reproduce.add_argument("--parallel", type=int, default=1, help="runs at once (threads are split between them)")
    reproduce.add_argument("--skip-variants", help="comma list of variants not to run; their cells say so")
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
    return parser


def _config_file(path: Path | None) -> dict:
    """`fpt train --config FILE.yaml`: train and task options by name, each of its option's type."""
    if path is None:
        return {}
    from fpt.config import coerce_option
    from fpt.experiments.sweep import read_yaml

    data = read_yaml(path, "config file")[0] or {}
    if not isinstance(data, dict):
        raise FptError(f"{path}: a config file maps option names to values, e.g. 'task: mnist'")
    known = _train_option_names()
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise FptError(f"{path}: unknown option {unknown[0]!r}; use `fpt train` option names with underscores")
    return {key: coerce_option(key, value, str(path)) for key, value in data.items()}


def _train_option_names() -> set[str]:
    from fpt.config import TrainConfig

    return ({f.name for f in dataclasses.fields(TrainConfig)} - {"task_options"}) | set(TASK_OPTIONS)


def _config_from_args(args: argparse.Namespace):
    from fpt.config import TrainConfig

    given = {k: v for k, v in vars(args).items() if k in _train_option_names() and v is not None}
    if getattr(args, "train_groups", None):
        given["policy"] = args.train_groups
    merged = {**_config_file(getattr(args, "config", None)), **given}  # flags override the file
    task_options = {k: merged.pop(k) for k in list(merged) if k in TASK_OPTIONS}
    return TrainConfig.from_recipe(merged.pop("recipe", "paper"), **merged, task_options=task_options)


def _resume_conflicts(args: argparse.Namespace) -> list[str]:
    """Options that would change a resumed run: only --steps may (to extend it)."""
    from fpt.config import TrainConfig

    fields = {f.name for f in dataclasses.fields(TrainConfig)} - {"steps", "task_options", "threads", "device"}
    given = [
        k
        for k in sorted(fields | set(TASK_OPTIONS) | {"train_groups", "out", "config"})
        if getattr(args, k, None) is not None
    ]
    return ["--" + k.replace("_", "-") for k in given]


def _report(summary: dict, run_dir: Path) -> None:
    from fpt.scores import describe

    final = summary["final"]
    reached = summary["target_reached_at_step"]
    where = f" (target reached at step {reached})" if reached else ""
    print(
        f"{final['split']} {describe(final)} on {final['examples']} examples "
        f"after {summary['step']} steps{where}, {summary['wall_time_s']:.1f} s"
    )
    for split, result in (summary.get("test") or {}).items():
        print(f"{split} {describe(result)} on {result['examples']} examples (scored once, at the end)")
    print(f"run directory: {run_dir}")


def cmd_train(args: argparse.Namespace) -> int | None:
    from fpt.config import check_threads
    from fpt.distributed import check_backend, is_main_process, launch
    from fpt.tracking import TRACKING_PARENT_ENV
    from fpt.training import resume, train

    check_threads(args.threads)
    check_backend(args.ddp_backend)
    tracker = _tracker(args, os.environ.get(TRACKING_PARENT_ENV))  # a sweep's cell nests under the sweep's run
    if args.resume is not None:
        conflicts = _resume_conflicts(args)
        if conflicts:
            raise FptError(
                f"--resume continues a run with its saved config; drop {', '.join(conflicts)} "
                "(only --steps may change, to extend the run)"
            )
    if args.nproc is not None:
        _check_before_launch(args)
        return launch(args.nproc, _without_nproc(args.argv))
    if args.resume is not None:
        summary, run_dir = resume(
            args.resume,
            steps=args.steps,
            progress=args.progress,
            device=args.device,
            ddp_backend=args.ddp_backend,
            tracker=tracker,
            threads=args.threads,
        )
    else:
        summary, run_dir = train(
            _config_from_args(args), out=args.out, progress=args.progress, ddp_backend=args.ddp_backend, tracker=tracker
        )
    if is_main_process():
        _report(summary, run_dir)
    return None


def _check_before_launch(args: argparse.Namespace) -> None:
    """What `--nproc N` can check in this process, so a usage mistake is one line here rather than
    one per rank under torchrun's report: the options, the batch split, the device, the run dir."""
    from fpt.checkpoint import load_checkpoint
    from fpt.devices import resolve_device
    from fpt.distributed import check_launch
    from fpt.runs import RunDir

    check_launch(args.nproc)
    if args.resume is not None:
        run = RunDir.existing(args.resume)
        if run.has_checkpoint:
            load_checkpoint(run.checkpoint_path).check_world_size(args.nproc, run.checkpoint_path)
        return
    config = _config_from_args(args)
    config.validate(args.nproc)
    resolve_device(config.device)
    if args.out is not None:
        RunDir.check_creatable(args.out)


def _without_nproc(argv: list[str]) -> list[str]:
    kept, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token == "--nproc":
            skip = True
        elif not token.startswith("--nproc="):
            kept.append(token)
    return kept


def cmd_evaluate(args: argparse.Namespace) -> None:
    from fpt.config import check_threads
    from fpt.experiments.plots import plot_confusion
    from fpt.runs import RunDir
    from fpt.scores import describe
    from fpt.training import evaluate, load_run

    check_threads(args.threads)
    shuffle_seed = _shuffle_option(args)
    config, task, model, trainer = load_run(args.run_dir, device=args.device, threads=args.threads)
    shuffled = None
    if shuffle_seed is not None:
        from fpt.tasks.shuffle import ShuffledTask, what_is_shuffled

        shuffled = ShuffledTask(task, shuffle_seed)
        print(f"shuffled: {what_is_shuffled(task.spec)}, seed {shuffle_seed}")
    single_label = task.spec.num_outputs == 1 and not task.spec.regression
    results, mixed = {}, {}
    for split in _chosen_splits(task, args.splits):
        result = evaluate(model, task, config.eval_batch_size, split, confusion=single_label)
        if single_label:
            png = args.run_dir / f"confusion_{split}.png"
            plot_confusion(
                result.pop("confusion"),
                png,
                f"{config.task} on {config.backbone}: {split} (accuracy {result['accuracy']:.4f})",
            )
            result["confusion_png"] = str(png)
        results[split] = result
        print(f"{split}: {describe(result)} on {result['examples']} examples, loss {result['loss']:.4f}")
        if shuffled is not None:
            mixed[split] = evaluate(model, shuffled, config.eval_batch_size, split)
            print(
                f"{split}, shuffled {args.shuffle}: {describe(mixed[split])}, loss {mixed[split]['loss']:.4f}; "
                f"{_change(result, mixed[split])} from the ordered inputs"
            )
    evaluation = {"step": trainer.step, "splits": results}
    if shuffled is not None:
        evaluation["shuffled"] = {
            "order": args.shuffle,
            "seed": shuffled.seed,
            "what": what_is_shuffled(task.spec),
            "splits": mixed,
        }
    print(f"written: {RunDir(args.run_dir).write_evaluation(evaluation)}")


def _shuffle_option(args: argparse.Namespace) -> int | None:
    """`fpt evaluate --shuffle tokens [--shuffle-seed N]`: the seed, or None without --shuffle."""
    from fpt.tasks.shuffle import check_shuffle

    if args.shuffle is None:
        if args.shuffle_seed is not None:
            raise FptError("--shuffle-seed goes with --shuffle tokens")
        return None
    check_shuffle(args.shuffle)
    seed = 0 if args.shuffle_seed is None else args.shuffle_seed
    if not 0 <= seed < 2**63:
        raise FptError(f"--shuffle-seed must be in 0..2^63-1, got {seed}")
    return seed


def _change(ordered: dict, shuffled: dict) -> str:
    """The shuffled score minus the ordered one, on the headline metric: "accuracy -0.4120"."""
    from fpt.scores import headline_metric

    metric = headline_metric(ordered)
    name = metric.upper() if metric == "mse" else metric
    return f"{name} {shuffled[metric] - ordered[metric]:+.4f}"


def _chosen_splits(task, which: str) -> tuple[str, ...]:
    """`fpt evaluate --splits`: all, test (the splits tables report) or names."""
    have = ", ".join(task.eval_splits)
    if which == "all":
        return task.eval_splits
    if which == "test":
        if not task.test_splits:
            raise FptError(f"task {task.name!r} has no test split (it has {have}); use --splits all")
        return task.test_splits
    names = tuple(name for name in which.split(",") if name)
    unknown = [name for name in names if name not in task.eval_splits]
    if unknown or not names:
        raise FptError(f"task {task.name!r} has no split {', '.join(unknown) or repr(which)}; it has {have}")
    return names


def cmd_info(args: argparse.Namespace) -> None:
    from fpt.policy import format_group_table
    from fpt.runtime import bf16_note
    from fpt.training import build

    config = _config_from_args(args)
    _, model = build(config)
    if config.model != "fpt":
        print(f"model {config.model} (every parameter trained), task {config.task}")
    else:
        print(
            f"backbone {config.backbone} ({model.backbone_info.family}, init {config.init}), "
            f"task {config.task}, policy {config.policy}"
        )
        if config.body != "backbone":
            from fpt.backbones.controls import describe_body

            print(describe_body(config.body, model.backbone, model.backbone_info.positions))
    print(format_group_table(model.group_rows))
    print(bf16_note())


def cmd_backbones(args: argparse.Namespace) -> None:
    from fpt.backbones import list_backbones

    print(f"{'name':<14} {'here':<5} description / how to get it")
    for entry in list_backbones():
        here = "yes" if entry.is_available() else "no"
        print(f"{entry.name:<14} {here:<5} {entry.description}")
        print(f"{'':<20} get: {entry.how_to_get}")
    print("Any Hugging Face hub id or local save_pretrained directory also works as --backbone.")


def cmd_attention(args: argparse.Namespace) -> None:
    from fpt.experiments.plots import mean_attention, plot_attention
    from fpt.training import load_run

    if args.examples < 1:
        raise FptError(f"--examples must be at least 1, got {args.examples}")
    config, task, model, trainer = load_run(args.run_dir, device=args.device)
    if config.model != "fpt":
        raise FptError(f"{args.run_dir} trained a {config.model}, which has no attention to plot")
    if config.body == "none":
        raise FptError(f"{args.run_dir} trained a --body none control, which has no attention layer to plot")
    attention = mean_attention(model, task, args.layer, args.examples)
    out = args.out or args.run_dir / f"attention_layer{args.layer}.png"
    title = f"{config.task} on {config.backbone}: layer {args.layer}, mean over heads (step {trainer.step})"
    read = task.spec.seq_len if model.head.pooling == "flatten" else task.spec.last_k  # flatten: every token is read
    print(plot_attention(attention, out, title, read))


def cmd_data(args: argparse.Namespace) -> None:
    from fpt.data.fetch import get_dataset

    path = get_dataset(args.name, args.dest)
    print(f"{args.name}: {path}")
    if args.dest is not None:
        print(f"train on it with --data-dir {path}")


def cmd_export_backbone(args: argparse.Namespace) -> None:
    from fpt.backbones import bit_backbone_path, export_backbone
    from fpt.runs import RunDir
    from fpt.scores import headline_metric, metric_label
    from fpt.training import load_run

    if args.out is not None and args.out.is_dir():
        raise FptError(f"--out {args.out} is a directory; give the path of a .safetensors file")
    config, _, model, trainer = load_run(args.run_dir, device=args.device)
    if config.model != "fpt":
        raise FptError(f"{args.run_dir} trained a {config.model}, not a transformer backbone")
    if config.body != "backbone":
        raise FptError(f"{args.run_dir} trained a --body {config.body} control, not the backbone's own blocks")
    if model.extended_positions is not None:
        raise FptError(
            f"{args.run_dir} grew the position table to {model.extended_positions[1]} rows; "
            "export a run whose task fits the backbone's own positions"
        )
    is_bit = config.task == "bit-memory" and config.init == "random" and config.policy == "full"
    out = args.out
    if out is None:
        if not is_bit:
            raise FptError(
                "give --out: only a Bit Memory run from --init random with --policy full "
                "has a default place (the one --init bit reads)"
            )
        out = bit_backbone_path(config.backbone)
    final = (RunDir(args.run_dir).read_summary() or {}).get("final")
    metric = headline_metric(final) if final else "accuracy"  # a forecast's: mse
    accuracy = "unknown (run not finished)" if final is None else f"{final[metric]:.4f}"
    export_backbone(
        model.backbone,
        out,
        {
            "backbone": config.backbone,
            "task": config.task,
            "init": config.init,
            "policy": config.policy,
            "step": str(trainer.step),
            metric: accuracy,
            "run": str(args.run_dir),
        },
    )
    print(
        f"backbone {config.backbone} after {trainer.step} steps of {config.task} "
        f"(held-out {metric_label(metric)} {accuracy}): {out}"
    )
    if out == bit_backbone_path(config.backbone):
        print(f"use it with --init bit --backbone {config.backbone}")


def cmd_export(args: argparse.Namespace) -> None:
    from fpt.export import export_run

    print(f"{args.format} export of {args.run_dir}: {export_run(args.run_dir, args.format, args.out)}")


def cmd_predict(args: argparse.Namespace) -> None:
    from fpt.prediction import (
        accuracy,
        check_output,
        is_saved_model,
        load_saved_model,
        predict_probabilities,
        read_inputs,
        write_predictions,
    )
    from fpt.training import eval_batch_for, load_run

    if args.batch_size < 1:
        raise FptError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.out is not None:
        check_output(args.out)  # before any work
    if is_saved_model(args.run_dir):  # written by `fpt export --format hf`
        task, model = load_saved_model(args.run_dir, args.device)
    else:
        _, task, model, _ = load_run(args.run_dir, device=args.device)
    if task.spec.regression:  # a forecast: windows from an .npz, or the steps after a CSV series
        from fpt.prediction import predict_forecast

        out = args.out or args.run_dir / f"predictions-{args.input.name}.csv"
        print("\n".join(predict_forecast(model, task, args.input, out, eval_batch_for(task, args.batch_size))))
        return
    batches, labels = read_inputs(args.input, task, eval_batch_for(task, args.batch_size))
    probabilities = predict_probabilities(model, batches)
    suffix = ".csv" if task.spec.num_outputs == 1 else ".jsonl"
    out = write_predictions(args.out or args.run_dir / f"predictions-{args.input.name}{suffix}", probabilities)
    print(f"{len(probabilities)} predictions: {out}")
    if labels is not None:
        print(f"accuracy {accuracy(probabilities, labels):.4f} on the labels in {args.input.name}")


def cmd_report(args: argparse.Namespace) -> None:
    from fpt.experiments.report import write_report

    print(write_report(args.directory, args.out))


def _refuse_under_torchrun(command: str) -> None:
    from fpt.distributed import launched

    if launched():
        raise FptError(
            f"fpt {command} runs whole trainings one after another, not as ranks of one; "
            "start it without torchrun (--executor ray spreads cells over a cluster)"
        )


def _executor(args: argparse.Namespace):
    """The Ray executor the flags ask for (checked, and ray imported, before anything runs), or
    None: the local one."""
    ray_flags = {
        "--ray-address": args.ray_address,
        "--cpus-per-run": args.cpus_per_run,
        "--gpus-per-run": args.gpus_per_run,
    }
    if args.executor == "local":
        given = [flag for flag, value in ray_flags.items() if value is not None]
        if given:
            raise FptError(f"{', '.join(given)}: for Ray only; add --executor ray")
        return None
    from fpt.experiments.ray_executor import RayExecutor

    return RayExecutor(
        args.ray_address,
        1 if args.cpus_per_run is None else args.cpus_per_run,
        0 if args.gpus_per_run is None else args.gpus_per_run,
    )


def cmd_sweep(args: argparse.Namespace) -> int:
    from fpt.experiments.sweep import load_spec, run_sweep, sweep_outcome, write_sweep_report

    _refuse_under_torchrun("sweep")
    executor = _executor(args)
    tracker = _tracker(args)
    spec = load_spec(args.spec)
    out = args.out or Path("runs") / f"sweep-{spec.name}"
    with executor or contextlib.nullcontext(), tracker.open(out, dataclasses.asdict(spec), role="sweep"):
        rows = run_sweep(spec, out, progress=args.progress, executor=executor, tracker=tracker)
        print(write_sweep_report(rows, spec, out))
        tracker.finish(*sweep_outcome(rows, out))
    print(f"sweep directory: {out}")
    return _failed_runs_status(rows, out / "results.md")


def cmd_reproduce(args: argparse.Namespace) -> int:
    from fpt.experiments.reproduce import Reproduction, run_reproduction
    from fpt.experiments.sweep import sweep_outcome, yaml_value

    _refuse_under_torchrun("reproduce")
    tracker = _tracker(args)
    options = {}
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise FptError(f"--set takes KEY=VALUE (e.g. --set precision=bf16), got {item!r}")
        options[key.replace("-", "_")] = yaml_value(value)
    executor = _executor(args)
    tables = [t for t in args.table.split(",") if t]
    plan = Reproduction(
        tables,
        args.tasks.split(",") if args.tasks else None,
        args.budget,
        args.seeds,
        args.backbone,
        args.parallel,
        tuple(v for v in (args.skip_variants or "").split(",") if v),
        options,
    )
    plan.check()
    out = args.out or Path("runs") / f"reproduce-{'-'.join(tables)}"
    with executor or contextlib.nullcontext(), tracker.open(out, dataclasses.asdict(plan), role="sweep"):
        rows, text = run_reproduction(plan, out, progress=args.progress, executor=executor, tracker=tracker)
        tracker.finish(*sweep_outcome(rows, out))
    print(text)
    print(f"results: {out}")
    return _failed_runs_status(rows, out / "results.md")


def _failed_runs_status(rows: list[dict], report: Path) -> int:
    """The exit status of a sweep: 1 when some of its runs failed, so that a script running it
    learns its tables are incomplete."""
    from fpt.experiments.sweep import failure_summary

    summary = failure_summary(rows)
    if summary is None:
        return 0
    print(
        f"fpt: {summary}; each is listed under 'Failed runs' in {report}; run the same command again once "
        f"fixed (finished runs are kept)",
        file=sys.stderr,
    )
    return 1


COMMANDS = {
    "train": cmd_train,
    "evaluate": cmd_evaluate,
    "info": cmd_info,
    "backbones": cmd_backbones,
    "attention": cmd_attention,
    "predict": cmd_predict,
    "sweep": cmd_sweep,
    "reproduce": cmd_reproduce,
    "data": cmd_data,
    "report": cmd_report,
    "export-backbone": cmd_export_backbone,
    "export": cmd_export,
}


def _record_failure(kind: str, message: str) -> None:
    """Inside a sweep cell, say what kind of failure this was (the file the sweep named, read by
    it afterwards); a failure to write it must not hide the failure being reported."""
    from fpt.experiments.sweep import FAILURE_RECORD_ENV
    from fpt.paths import write_json

    target = os.environ.get(FAILURE_RECORD_ENV)
    if target:
        try:
            write_json(Path(target), {"kind": kind, "message": message})
        except OSError:
            pass


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser().parse_args(argv)
        args.argv = argv
        if getattr(args, "progress", False) is None:  # a bar redrawn in a log file is noise
            args.progress = sys.stderr.isatty()
        status = COMMANDS[args.command](args)
    except FptError as exc:
        print(f"fpt: error: {exc}", file=sys.stderr)
        _record_failure(exc.kind, str(exc))
        return 2
    except BrokenPipeError:  # `fpt backbones | head -1`: the reader left; nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a path the user gave that the system refuses: read-only, full disk, ...
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"fpt: error: {exc.strerror or exc}{where}", file=sys.stderr)
        _record_failure("usage", f"{exc.strerror or exc}{where}")
        return 2
    except StopRequested as exc:  # Ctrl-C or SIGTERM during training: the checkpoint is saved
        print(f"fpt: {exc}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print(
            "fpt: interrupted; a run continues from its last checkpoint with `fpt train --resume RUN_DIR`",
            file=sys.stderr,
        )
        return 130
    return status or 0


def entry() -> NoReturn:
    """The `fpt` command and `python -m fpt`: main's status becomes the exit status. A rank of a
    torchrun job leaves through `distributed.exit_rank` (see there why), whatever ended main."""
    try:
        several = distributed.launched()
    except FptError as exc:  # WORLD_SIZE set to something not a count
        print(f"fpt: error: {exc}", file=sys.stderr)
        sys.exit(2)
    if not several:
        sys.exit(main())
    try:
        status = main()
    except SystemExit as leaving:  # argparse: --help (0) or a usage error (2), already printed
        status = leaving.code
        if status is not None and not isinstance(status, int):  # a message, as Python would print it
            print(status, file=sys.stderr)
            status = 1
    except BaseException:  # a bug: its traceback, as Python would print it
        traceback.print_exc()
        status = 1
    distributed.exit_rank(status or 0)


if __name__ == "__main__":
    entry()
