"""The `fpt` command: the parsers (fpt.cli.parser, the `fpt train` options generated from
TrainConfig's fields) and one `cmd_*` function per command (fpt.cli.train, .runs, .sweeps);
`COMMANDS` lists them all.

Every mistake a user can make ends in one line on stderr naming the fix, and exit status 2.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from pathlib import Path
from typing import NoReturn

from fpt.cli.parser import build_parser
from fpt.cli.runs import (
    cmd_attention,
    cmd_backbones,
    cmd_backtest,
    cmd_data,
    cmd_evaluate,
    cmd_export,
    cmd_export_backbone,
    cmd_predict,
    cmd_report,
)
from fpt.cli.sweeps import cmd_competitions, cmd_controls, cmd_reproduce, cmd_shuffled, cmd_sweep
from fpt.cli.train import cmd_info, cmd_train
from fpt.core.errors import FptError, StopRequested
from fpt.core.runtime import FAILURE_RECORD_ENV, PARENT_PID_ENV, PROGRESS_LINES, StopOnSignal, watch_parent
from fpt.training import distributed

__all__ = ["COMMANDS", "build_parser", "entry", "main"]


COMMANDS = {
    "train": cmd_train,
    "evaluate": cmd_evaluate,
    "backtest": cmd_backtest,
    "info": cmd_info,
    "backbones": cmd_backbones,
    "attention": cmd_attention,
    "predict": cmd_predict,
    "sweep": cmd_sweep,
    "reproduce": cmd_reproduce,
    "controls": cmd_controls,
    "competitions": cmd_competitions,
    "shuffled": cmd_shuffled,
    "data": cmd_data,
    "report": cmd_report,
    "export-backbone": cmd_export_backbone,
    "export": cmd_export,
}


def _record_failure(kind: str, message: str) -> None:
    """Inside a sweep cell, say what kind of failure this was (the file the sweep named, read by
    it afterwards); a failure to write it must not hide the failure being reported."""
    from fpt.core.paths import write_json

    target = os.environ.get(FAILURE_RECORD_ENV)
    if target:
        try:
            write_json(Path(target), {"kind": kind, "message": message})
        except OSError:
            pass


def _stop_now(signum: int) -> None:
    """Ctrl-C or SIGTERM outside a training loop (loading data, building a model, writing results):
    the command ends now, with the same exit status as a stopped run, not killed by the default handler."""
    name = signal.Signals(signum).name
    raise StopRequested(
        f"{name}: stopped; a run continues from its last checkpoint with `fpt train --resume RUN_DIR`", signum
    )


def main(argv: list[str] | None = None) -> int:
    """Run one `fpt` command (`argv`, default sys.argv[1:]) and return its exit status instead of exiting:
    the command's own (0 when done), 2 for an FptError or a path the system refuses (one line on stderr),
    128 + signal for training stopped by a signal (0 by --max-minutes; the checkpoint saved), 130 for Ctrl-C
    elsewhere. argparse's --help and usage errors still raise SystemExit."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    parent = os.environ.pop(PARENT_PID_ENV, None)  # a sweep's cell: dies with its sweep (not passed on)
    if parent and parent.isdigit():
        watch_parent(int(parent))
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser().parse_args(argv)
        args.argv = argv
        if getattr(args, "progress", False) is None:  # a bar redrawn in a log file is noise: lines there
            args.progress = True if sys.stderr.isatty() else PROGRESS_LINES
        with StopOnSignal(_stop_now):  # a trainer, a sweep put their own in place while they run
            status = COMMANDS[args.command](args)
    except FptError as exc:
        if not exc.said_by_rank_0:  # under torchrun, an error every rank got from rank 0 is printed once
            distributed.say_last(f"fpt: error: {exc}")
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
    except StopRequested as exc:  # Ctrl-C, SIGTERM or --max-minutes during training: the checkpoint is saved
        distributed.say_last(f"fpt: {exc}")
        return 128 + exc.signum if exc.signum else 0
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
