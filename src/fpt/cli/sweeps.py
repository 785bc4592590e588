"""`fpt sweep` and `fpt reproduce`: grids of whole runs, here or on Ray; exit status 1 when some
of their runs failed."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import sys
from pathlib import Path

from fpt.cli.parser import tracker_from_args
from fpt.core.errors import FptError

# What the last step of a sweep or reproduction imports to write its tables and pictures, loaded as
# it starts: a run of hours then ends on the code it began with, and fpt changed or upgraded under it
# cannot break that step (a module imported fresh at the end, needing a name that the old copy of a
# module loaded at the start lacks, stopped a finished reproduction here once). What builds a model
# or a task at the end (test and shuffled scores) runs in processes of its own, on the code installed.
END_OF_RUN_MODULES = (
    "fpt.experiments.competition_tables",
    "fpt.experiments.controls",
    "fpt.experiments.plots",
    "fpt.experiments.published_tables",
    "fpt.experiments.shuffled",
    "fpt.experiments.tables",
    "fpt.experiments.ucr_tables",
)


def _load_end_of_run_modules() -> None:
    for name in END_OF_RUN_MODULES:
        importlib.import_module(name)


def _refuse_under_torchrun(command: str) -> None:
    from fpt.training.distributed import launched

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
    """`fpt sweep SPEC`: run (or continue) the spec's cells, print and write their table; 1 where
    some failed. Cells its `max_minutes` (or --max-minutes) stopped are said on stderr: the same
    command continues them."""
    from fpt.experiments.paper import PAPER_VARIANTS
    from fpt.experiments.report import write_sweep_report
    from fpt.experiments.sweep import STOPPED, run_sweep, sweep_outcome
    from fpt.experiments.sweep_spec import load_spec
    from fpt.training.config import check_max_minutes

    _refuse_under_torchrun("sweep")
    _load_end_of_run_modules()
    executor = _executor(args)
    tracker = tracker_from_args(args)
    spec = load_spec(args.spec, PAPER_VARIANTS)  # a grid's `variant` names one of the paper's
    if args.max_minutes is not None:  # this sitting's limit, in place of the spec's
        check_max_minutes(args.max_minutes)
        spec = dataclasses.replace(spec, max_minutes=args.max_minutes)
    out = args.out or Path("runs") / f"sweep-{spec.name}"
    with executor or contextlib.nullcontext(), tracker.open(out, spec.as_dict(), role="sweep"):
        rows = run_sweep(spec, out, progress=args.progress, executor=executor, tracker=tracker)
        print(write_sweep_report(rows, spec, out))
        tracker.finish(*sweep_outcome(rows, out))
    print(f"sweep directory: {out}")
    stopped = sum(r["status"] == STOPPED for r in rows)
    if stopped:
        print(
            f"fpt: {stopped} of {len(rows)} runs stopped at max_minutes {spec.max_minutes:g} with a checkpoint; "
            "run the same command again to continue them",
            file=sys.stderr,
        )
    return _failed_runs_status(rows, out / "results.md")


def cmd_reproduce(args: argparse.Namespace) -> int:
    """`fpt reproduce TABLES`: the ready-made sweeps beside the paper's tables; 1 where some runs failed."""
    from fpt.experiments.budget_search import parse_budget_search
    from fpt.experiments.rate_search import parse_lr_search
    from fpt.experiments.reproduce import Reproduction, parse_set_options, run_reproduction
    from fpt.experiments.sweep import sweep_outcome

    _refuse_under_torchrun("reproduce")
    _load_end_of_run_modules()
    tracker = tracker_from_args(args)
    options = parse_set_options(args.set)
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
        parse_lr_search(args.lr_search),
        parse_budget_search(args.budget_search),
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
    from fpt.experiments.tables import failure_summary

    summary = failure_summary(rows)
    if summary is None:
        return 0
    print(
        f"fpt: {summary}; each is listed under 'Failed runs' in {report}; run the same command again once "
        f"fixed (finished runs are kept)",
        file=sys.stderr,
    )
    return 1


def cmd_controls(args: argparse.Namespace) -> int:
    """`fpt controls FOLDER`: the controls table of the runs under FOLDER, printed or written to --out."""
    from fpt.experiments.controls import write_controls_table

    text = write_controls_table(args.folder, args.out, args.title, args.note, args.chart)
    if args.out is None:
        print(text, end="")
    return 0


def cmd_shuffled(args: argparse.Namespace) -> int:
    """`fpt shuffled RUN`: score a finished run's test split on shuffled inputs, into RUN/shuffled.json."""
    from fpt.experiments.shuffled import SHUFFLE_SEED, shuffle_evaluation

    shuffle_evaluation(args.run_dir, SHUFFLE_SEED if args.seed is None else args.seed)
    return 0


def cmd_competitions(args: argparse.Namespace) -> int:
    """`fpt competitions FOLDER`: the m3 or tourism tables of the runs under FOLDER, printed or written to --out."""
    from fpt.core.paths import write_text
    from fpt.experiments.competition_tables import competition_tables_text

    text = competition_tables_text(args.folder)
    if args.out is None:
        print(text, end="")
    else:
        write_text(args.out, text)
    return 0
