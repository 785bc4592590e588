"""`fpt train` and `fpt info`: options from the command line and a --config file, merged into a
TrainConfig; a run started, resumed, or launched on N processes under torchrun."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

from fpt.cli.parser import tracker_from_args
from fpt.core.choices import TASK_OPTIONS  # the registry's table, without importing a task
from fpt.core.errors import FptError


def _config_file(path: Path | None) -> dict:
    """`fpt train --config FILE`: train and task options by name, each of its option's type; YAML, or
    JSON where the name ends in .json. The task's options may also be given as one `task_options`
    mapping, as a run's config.json holds them: a run's config.json, or the one a sweep writes for
    each cell (fpt.experiments.sweep), is a config file of its own."""
    if path is None:
        return {}
    from fpt.training.config import coerce_option

    if path.suffix == ".json":
        from fpt.core.jsonfile import read_json_object

        data = read_json_object(path, missing="give the path of a JSON config", damaged="give a JSON config")
    else:
        from fpt.experiments.sweep_spec import read_yaml

        data = read_yaml(path, "config file")[0]
    if not isinstance(data, dict):
        raise FptError(f"{path}: a config file maps option names to values, e.g. 'task: mnist'")
    nested = data.pop("task_options", None) or {}
    if not isinstance(nested, dict):
        raise FptError(f"{path}: task_options maps the task's option names to values, e.g. {{'n_bits': 5}}")
    from fpt.tasks.registry import NOT_OPTIONS

    # a run's plan also records what its task's name says (npz:PATH's path), a forecast file's hash pinned for a
    # resume, which a new run takes from the task's name again, and its task's unset options, as null
    nested = {k: v for k, v in nested.items() if k not in NOT_OPTIONS and v is not None}
    known = _train_option_names()
    unknown = sorted(str(k) for k in [*data, *nested] if k not in known or (k in nested and k not in TASK_OPTIONS))
    if unknown:
        raise FptError(f"{path}: unknown option {unknown[0]!r}; use `fpt train` option names with underscores")
    return {key: coerce_option(key, value, str(path)) for key, value in {**nested, **data}.items()}


def _is_run_plan(path: Path | None) -> bool:
    """Whether a --config file is a run's config.json, its plan (beside the run's metrics)."""
    from fpt.training.run_dir import RunDir

    return path is not None and path.name == RunDir.CONFIG and (path.parent / RunDir.METRICS).is_file()


def _train_option_names() -> set[str]:
    from fpt.training.config import TrainConfig

    return ({f.name for f in dataclasses.fields(TrainConfig)} - {"task_options"}) | set(TASK_OPTIONS)


def _config_from_args(args: argparse.Namespace):
    from fpt.training.config import TrainConfig

    given = {k: v for k, v in vars(args).items() if k in _train_option_names() and v is not None}
    if getattr(args, "train_groups", None):
        given["policy"] = args.train_groups
    from_file = _config_file(getattr(args, "config", None))
    if {"steps", "epochs"} & set(given):  # a budget given here replaces the file's, both of its fields
        from_file = {k: v for k, v in from_file.items() if k not in ("steps", "epochs")}
    elif _is_run_plan(getattr(args, "config", None)):  # the epochs a run was asked and the steps they came to
        from_file.pop("epochs", None)
    merged = {**from_file, **given}  # flags override the file; TrainConfig.validate checks them all
    task_options = {k: merged.pop(k) for k in list(merged) if k in TASK_OPTIONS}
    return TrainConfig.from_recipe(merged.pop("recipe", "paper"), **merged, task_options=task_options)


def _given_with_resume(args: argparse.Namespace) -> list[str]:
    """The options given beside --resume that a run's plan holds (fpt.training.config.check_resume_options
    says which may change)."""
    names = _train_option_names() | {"train_groups", "out", "config"}
    return sorted(name for name in names if getattr(args, name, None) is not None)


def _report(summary: dict, run_dir: Path) -> None:
    from fpt.core.scores import describe
    from fpt.training.intervals import coverage_line
    from fpt.training.reference_scores import comparison_lines

    final = summary["final"]
    reached = summary["target_reached_at_step"]
    where = f" (target reached at step {reached})" if reached else ""
    if "best_step" in summary:  # --keep-best: the result is the best evaluation's, at its step
        early = ", stopped early" if summary["status"] == "stopped_early" else ""
        where += f" (the best evaluation, at step {summary['best_step']}{early})"
    print(
        f"{final['split']} {describe(final)} on {final['examples']} examples "
        f"after {summary['step']} steps{where}, {summary['wall_time_s']:.1f} s"
    )
    for split, result in (summary.get("test") or {}).items():
        print(f"{split} {describe(result)} on {result['examples']} examples (scored once, at the end)")
    if "intervals" in summary:
        print(coverage_line(summary["intervals"]))
    for line in comparison_lines(summary):  # the field's reference methods beside fpt, where there are any
        print(line)
    print(f"run directory: {run_dir}")


def cmd_train(args: argparse.Namespace) -> int | None:
    """`fpt train`: a new run, a --resume, or --nproc ranks under the launcher (its exit status returned)."""
    from fpt.tracking import TRACKING_PARENT_ENV
    from fpt.training.config import check_resume_options, check_run_options
    from fpt.training.distributed import is_main_process, launch
    from fpt.training.lifecycle import resume, train

    # the options of how a run runs, and with --resume which ones are given; a new run's plan is checked whole
    # by TrainConfig.validate: both in fpt.training.config
    check_run_options(args.threads, args.max_minutes, args.ddp_backend, args.device, args.nproc)
    if args.resume is not None:
        check_resume_options(_given_with_resume(args))
    tracker = tracker_from_args(args, os.environ.get(TRACKING_PARENT_ENV))  # a sweep's cell nests under the sweep's run
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
            max_minutes=args.max_minutes,
        )
    else:
        summary, run_dir = train(
            _config_from_args(args),
            out=args.out,
            progress=args.progress,
            ddp_backend=args.ddp_backend,
            tracker=tracker,
            max_minutes=args.max_minutes,
        )
    if is_main_process():
        _report(summary, run_dir)
    return None


def _check_before_launch(args: argparse.Namespace) -> None:
    """What `--nproc N` can check in this process, so a usage mistake is one line here rather than
    one per rank under torchrun's report: the options, the batch split, the device, the run dir."""
    from fpt.core.devices import resolve_device
    from fpt.training.checkpoint import load_checkpoint
    from fpt.training.run_dir import RunDir

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


def cmd_info(args: argparse.Namespace) -> None:
    """`fpt info`: the model a run would train, its groups, trained or frozen, and precision; counted from
    the backbone's files where they tell (no transformers, no weights read), else from the model built."""
    from fpt.core.runtime import bf16_note
    from fpt.models.policy import format_group_table
    from fpt.training.build import build_task, counts_without_weights, plan_and_build

    asked = _config_from_args(args)
    asked.validate()
    task = build_task(asked)
    model, counted = None, counts_without_weights(asked, task)
    if counted is not None:
        config, family, rows = counted
    else:
        config, model = plan_and_build(asked, task)  # the plan: --precision auto resolved
        family, rows = getattr(getattr(model, "backbone_info", None), "family", None), model.group_rows
    if config.model != "fpt":
        print(f"model {config.model} (every parameter trained), task {config.task}")
    else:
        print(f"backbone {config.backbone} ({family}, init {config.init}), task {config.task}, policy {config.policy}")
        if config.body != "backbone":  # never counted without the model
            from fpt.backbones.control_bodies import describe_body

            print(describe_body(config.body, model.backbone, model.backbone_info.positions))
    print(format_group_table(rows))
    picked = " (--precision auto's pick on this machine)" if asked.precision == "auto" else ""
    print(f"precision {config.precision}{picked}")
    print(bf16_note())
