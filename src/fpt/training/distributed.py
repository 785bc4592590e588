"""Data-parallel training on torch.distributed, launched by torchrun (one process per rank).

The one place that talks to the process group. A run sees a `World`: its rank, the number of
ranks, and a few collectives that are no-ops in a single process, so the training loop reads the
same with one process or many. Rank 0 alone writes the run directory; decisions that rank 0
makes alone (creating that directory, reading a checkpoint) are broadcast with `agree`, so every
rank raises the same one-line error or goes on with the same value.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NoReturn, TypeVar

if TYPE_CHECKING:
    import torch

# torch is imported by the functions that use it: the `fpt` command asks `launched()` and says its
# errors through `say_last` before every command, --help and a usage error too, which need no torch
# (issue 59: `fpt --help` took 1.3x a bare `import torch`).

from fpt.core.errors import FptError
from fpt.core.runtime import usable_cores, watch_parent

T = TypeVar("T")

BACKENDS = ("gloo", "nccl")
# A rank that waits longer than this on a collective ends the job (a crashed or stuck peer), instead
# of hanging; long enough for an evaluation of a whole split on a slow rank.
TIMEOUT_ENV = "FPT_DDP_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 1800


def _launch_number(name: str, default: str, kind: type = int):
    """A number torchrun put in the environment; anything else is one line naming the variable."""
    text = os.environ.get(name, default)
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not value >= 0 or value == float("inf"):
        raise FptError(
            f"environment variable {name}={text!r} is not a count; unset it, "
            "or let torchrun set it (torchrun --nproc-per-node N -m fpt ...)"
        )
    return value


def launched() -> bool:
    """Whether this process is one of several ranks started by torchrun (or an equivalent launcher)."""
    return _launch_number("WORLD_SIZE", "1") > 1


def is_main_process() -> bool:
    """Rank 0, or the only process: the one that prints results."""
    return not launched() or _launch_number("RANK", "0") == 0


def check_backend(name: str | None, device: str | None = None) -> None:
    """A backend this torch and machine can run: NCCL only between CUDA tensors of a torch built with it."""
    if name is not None and name not in BACKENDS:
        raise FptError(f"unknown --ddp-backend {name!r}; choose {' or '.join(BACKENDS)}")
    if name == "nccl":
        import torch
        import torch.distributed as dist

        if not (dist.is_nccl_available() and torch.cuda.is_available()):
            raise FptError("--ddp-backend nccl needs CUDA GPUs and a torch built with NCCL; use --ddp-backend gloo")
        if device is not None and not str(device).startswith(("cuda", "auto")):
            raise FptError(f"--ddp-backend nccl reduces CUDA tensors, not --device {device}'s; use --ddp-backend gloo")


def _check_rendezvous() -> tuple[str, int]:
    """MASTER_ADDR and MASTER_PORT, which init_process_group reads (torchrun sets both): one line
    naming the variable instead of torch's ValueError traceback."""
    address, port = os.environ.get("MASTER_ADDR", "").strip(), os.environ.get("MASTER_PORT", "").strip()
    if not address:
        raise FptError(
            f"WORLD_SIZE={os.environ['WORLD_SIZE']} but no MASTER_ADDR: start the ranks with torchrun "
            "(torchrun --nproc-per-node N -m fpt ...), or unset WORLD_SIZE and RANK for one process"
        )
    if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise FptError(f"environment variable MASTER_PORT={port!r} is not a port (1 to 65535); let torchrun set it")
    return address, int(port)


# The process that started this rank (torchrun's agent: `fpt train --nproc` runs it in-process).
LAUNCHER_PID_ENV = "FPT_LAUNCHER_PID"
# A folder `launch` makes where each rank leaves the lines it ends with (rank-N.txt): rank 0 prints its
# own, the launcher prints another rank's only where it differs, so a line every rank says appears once.
RANK_LINES_ENV = "FPT_RANK_LINES"


def say_last(line: str) -> None:
    """The line a process ends with (an error, a stop): printed on stderr, but under `fpt train --nproc`
    by rank 0 alone, every rank's kept for the launcher (`_repeat_other_ranks`)."""
    folder = os.environ.get(RANK_LINES_ENV) if launched() else None
    if folder:
        with contextlib.suppress(OSError):
            with open(Path(folder) / f"rank-{_launch_number('RANK', '0')}.txt", "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
    if folder is None or is_main_process():
        print(line, file=sys.stderr, flush=True)


def _repeat_other_ranks(folder: Path) -> None:
    """After the ranks ended: each line another rank said that rank 0 did not, once, naming the rank."""
    said = {}
    for path in sorted(folder.glob("rank-*.txt"), key=lambda p: int(p.stem.split("-")[1])):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            said[int(path.stem.split("-")[1])] = path.read_text(encoding="utf-8").splitlines()
    shown = set(said.get(0, []))
    for rank, lines in said.items():
        for line in lines:
            if line not in shown:
                print(f"{line} (rank {rank})", file=sys.stderr)
                shown.add(line)


# After the launcher died, a rank has this long to finish its step and save (SIGTERM), then it is killed.
ORPHAN_GRACE_S = 30.0
_guarded = threading.Event()


def guard_rank(poll_s: float = 0.5) -> None:
    """Tie this rank to its launcher (once per process). The rank leaves the terminal's process group,
    so one Ctrl-C reaches the launcher alone, which forwards one request (see `launch`); and a
    watch (fpt.core.runtime.watch_parent) stops the rank when the launcher dies (kill -9), as SIGTERM
    would (the step under way finishes, a checkpoint is saved), then kills it ORPHAN_GRACE_S later, so
    no rank keeps training, or holding the run's lock, without its launcher."""
    if _guarded.is_set() or "TORCHELASTIC_RUN_ID" not in os.environ:  # a rank started by hand keeps its terminal
        return
    _guarded.set()
    with contextlib.suppress(OSError):  # already a session leader (torch >= 2.5 starts ranks so)
        os.setsid()
    launcher = os.environ.get(LAUNCHER_PID_ENV, "")
    watch_parent(
        os.getppid(),
        also=int(launcher) if launcher.isdigit() else None,
        poll_s=poll_s,
        say=f"fpt: rank {os.environ.get('RANK', '?')}: the launcher is gone; stopping as on SIGTERM",
        kill_after_s=ORPHAN_GRACE_S,
    )


@dataclass(frozen=True)
class World:
    """This process's place among the ranks of a run (rank 0 of 1 without torchrun)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    owns_group: bool = False  # this World started the process group (and ends it in `stop`)

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0: the one rank that writes the run directory, prints and tracks."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """Whether the run has more than one rank (collectives are then real; with one they return at once)."""
        return self.size > 1

    def all_reduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        """The elementwise sum over ranks (in place; returned for chaining)."""
        if self.distributed:
            import torch.distributed as dist

            dist.all_reduce(values, op=dist.ReduceOp.SUM)
        return values

    def all_gather(self, value: T) -> list[T]:
        """Every rank's `value`, in rank order (pickled between our own ranks, never from a file)."""
        if not self.distributed:
            return [value]
        import torch.distributed as dist

        gathered: list = [None] * self.size
        dist.all_gather_object(gathered, value)
        return gathered

    def agree(self, on_main: Callable[[], T]) -> T:
        """Run `on_main` on rank 0 and hand its result, or its FptError, to every rank."""
        if not self.distributed:
            return on_main()
        import torch.distributed as dist

        outcome: list = [None]
        if self.is_main:
            try:
                outcome[0] = ("ok", on_main())
            except FptError as exc:
                outcome[0] = ("error", (str(exc), exc.kind))
            except OSError as exc:  # a path rank 0 cannot use: every rank says so in one line
                where = f" ({exc.filename})" if exc.filename else ""
                outcome[0] = ("error", (f"{exc.strerror or exc}{where}", "usage"))
        dist.broadcast_object_list(outcome, src=0)
        status, value = outcome[0]
        if status == "error":
            message, kind = value
            raise FptError(message, kind, said_by_rank_0=not self.is_main)
        return value

    def check_same(self, what: str, value: str) -> None:
        """Refuse ranks that disagree on `value` (e.g. their frozen weights' hash): the backbone is
        never broadcast, each rank loads its own, so a node with other files must not train."""
        values = self.all_gather(value)
        if len(set(values)) > 1:
            odd = next(rank for rank, v in enumerate(values) if v != values[0])
            raise FptError(
                f"ranks 0 and {odd} have different {what} ({values[0]} vs {values[odd]}); "
                "give every node the same backbone files"
            )


SINGLE = World()


def is_peer_failure(exc: BaseException) -> bool:
    """Whether a collective failed because another rank left (it crashed, or stopped on its error)."""
    import torch.distributed as dist

    text = str(exc)
    return isinstance(exc, getattr(dist, "DistError", ())) or any(
        words in text for words in ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "Gloo")
    )


def start(backend: str | None = None) -> World:
    """Join the process group torchrun set up the environment for (once per process); a single
    process gets SINGLE. Each rank on a CUDA machine takes the GPU of its LOCAL_RANK."""
    check_backend(backend)
    if not launched():
        return SINGLE
    if "RANK" not in os.environ:
        raise FptError(
            f"WORLD_SIZE={os.environ['WORLD_SIZE']} but no RANK: start the ranks with torchrun "
            "(torchrun --nproc-per-node N -m fpt ...), or unset WORLD_SIZE for one process"
        )
    rank, size = _launch_number("RANK", "0"), _launch_number("WORLD_SIZE", "1")
    local_rank = _launch_number("LOCAL_RANK", "0")
    if rank >= size:
        raise FptError(f"RANK={rank} with WORLD_SIZE={size}: ranks count from 0 to WORLD_SIZE-1; let torchrun set them")
    import torch
    import torch.distributed as dist

    owns_group = not dist.is_initialized()
    if owns_group:
        seconds = _launch_number(TIMEOUT_ENV, str(DEFAULT_TIMEOUT_S), float)
        if not 1 <= seconds <= 10**7:  # 0 fails every collective at once; timedelta overflows past ~1e14
            raise FptError(f"{TIMEOUT_ENV}={seconds:g}: give 1 to 10^7 seconds (default {DEFAULT_TIMEOUT_S})")
        address, port = _check_rendezvous()
        guard_rank()
        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank % torch.cuda.device_count())
        _join(backend, rank, size, f"{address}:{port}", seconds)
    elif torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    return World(rank=rank, size=size, local_rank=local_rank, owns_group=owns_group)


# A rendezvous longer than this is said on stderr (what this rank waits for, and for how long at most).
WAITING_NOTICE_S = 3.0


def _join(backend: str | None, rank: int, size: int, where: str, seconds: float) -> None:
    """init_process_group, saying what it waits for when that takes long, and a timeout in one line.
    c10d's C++ log lines (each failed try of a TCPStore client, with a stack) go to the file
    descriptor, not sys.stderr: it points at /dev/null meanwhile, the outcome is said here."""
    import torch.distributed as dist

    sys.stderr.flush()
    saved = os.dup(2)
    said = os.fdopen(os.dup(saved), "w", buffering=1)
    notice = threading.Timer(
        WAITING_NOTICE_S,
        lambda: print(
            f"fpt: rank {rank} is waiting for all {size} ranks to join at {where} "
            f"(for up to {seconds:g} s, {TIMEOUT_ENV}); start every rank, or Ctrl-C",
            file=said,
        ),
    )
    notice.daemon = True
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        notice.start()
        # No backend given: torch creates gloo for CPU tensors and, where CUDA is, nccl for GPU ones.
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=seconds))
    except (RuntimeError, ValueError) as exc:  # DistStoreError and DistNetworkError are RuntimeErrors
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        if "timed out" in text.lower() or "timeout" in text.lower():
            raise FptError(
                f"rank {rank}: not all {size} ranks joined at {where} within {seconds:g} s ({TIMEOUT_ENV}); "
                "start every rank with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE"
            ) from None
        raise FptError(f"rank {rank} cannot join the process group at {where} ({text})") from None
    finally:
        notice.cancel()
        os.dup2(saved, 2)
        os.close(saved)
        said.close()


def stop(world: World, finished: bool = True) -> None:
    """Leave the process group if `start` joined it (the Python API may train again). After a
    normal end the ranks first wait for each other, so none tears its connections down while
    another still talks to it; after an error they do not (a peer may never arrive)."""
    import torch.distributed as dist

    if world.owns_group and dist.is_initialized():
        if finished:
            dist.barrier()
        dist.destroy_process_group()


def exit_rank(status: int) -> NoReturn:
    """End a torchrun rank whose work is done with `status`, without the interpreter's native teardown.
    Why: under torch 2.13 a finished rank sometimes aborts at exit, likely because gloo still holds a
    joinable std::thread when the C++ destructors run: std::terminate ends the rank (SIGABRT,
    "terminate called without an active exception") and torchrun fails a job that had finished,
    after `stop` and its barrier: 12 of 50 two-rank evaluations sharing one core on an AMD EPYC here
    (2 of 55 on an Intel Xeon), none of 100 leaving this way. Python's own exit work still runs
    first (atexit handlers: trackers, logging), then stdout and stderr are flushed."""
    atexit._run_exitfuncs()  # CPython's own exit step, callable since 2.x though not documented
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream must not stop the exit
            stream.flush()
    os._exit(status)


def rank_seed(seed: int, rank: int) -> int:
    """Each rank's seed for dropout masks, so ranks do not drop the same units of their slices."""
    return (seed * 1_000_033 + rank) % (2**63)


def wrap(model: torch.nn.Module, world: World) -> torch.nn.Module:
    """DistributedDataParallel over the trained parameters only: the frozen weights are neither
    broadcast at the start nor all-reduced (each rank loaded the same ones; `check_same`)."""
    if not world.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel

    frozen = [name for name, p in model.named_parameters() if not p.requires_grad]
    frozen += [name for name, _ in model.named_buffers()]
    # torch's own switch for state DDP must leave alone (used by TorchRec for sharded tables)
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, frozen)
    device = next(model.parameters()).device
    return DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)


def check_launch(nproc: int) -> None:
    """Refuse, as FptError, an --nproc below 1, or any --nproc inside a process torchrun already started."""
    if nproc < 1:
        raise FptError(f"--nproc must be at least 1, got {nproc}")
    if launched():
        raise FptError("--nproc starts torchrun itself; under torchrun, drop --nproc")


def _children() -> list[int]:
    """The pids of this process's children (the ranks), from /proc; none where there is no /proc."""
    me, found = str(os.getpid()), []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError):
                    with open(f"/proc/{entry.name}/stat", "rb") as stat:  # "pid (name) state ppid ..."
                        if stat.read().rsplit(b")", 1)[1].split()[1].decode() == me:
                            found.append(int(entry.name))
    return found


class _Forwarder:
    """The launcher's own SIGINT and SIGTERM handling (torchrun is told to leave them alone): each
    signal is sent once to every rank, which stops after its step with a checkpoint (a second one:
    at once), while torchrun keeps waiting for the ranks to leave; a third kills them. The ranks sit
    in their own sessions (guard_rank), so a terminal's Ctrl-C reaches them only through here."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received = 0
        self.previous = {number: signal.signal(number, self.forward) for number in self.SIGNALS}

    def forward(self, signum, frame) -> None:
        ranks = _children()
        if not ranks:  # none started yet (or no /proc): stop the launch, torchrun stops what it began
            raise KeyboardInterrupt
        self.received += 1
        for pid in ranks:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL if self.received >= 3 else signum)

    def restore(self) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)


def first_failure(failures: dict) -> tuple[int, int]:
    """(rank, exit code) of the failure that caused the others, as far as the codes tell: a rank
    killed by a signal (negative code) before one that failed on its own (1, a crash), before the
    usage status 2 and the stops on request (128 + N), which ranks also end with when a peer left;
    then the earliest, then the lowest rank. torchrun's own order is not the order they failed in.
    A death by SIGTERM counts as a stop: it is what torchrun sends the survivors of a failure, and a
    rank whose handler is in place turns a SIGTERM from anyone else into 143."""
    stops = (2, 128 + signal.SIGINT, 128 + signal.SIGTERM, -signal.SIGTERM)

    def cause(item) -> tuple:
        rank, failure = item
        code = failure.exitcode
        kind = 2 if code in stops else 0 if code < 0 else 1
        return kind, failure.timestamp, rank

    rank, failure = min(failures.items(), key=cause)  # keyed by global rank
    return rank, failure.exitcode


def describe_failure(rank: int, code: int) -> str | None:
    """One line for the launcher to print about the first failure, or None where the rank said it
    itself (a usage error's line, a stop on request)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"rank {rank} was killed by {name}; the other ranks were stopped (exit status {128 - code})"
    if code in (2, 128 + signal.SIGINT, 128 + signal.SIGTERM):
        return None
    return f"rank {rank} failed with exit status {code} (its own output above says why); the other ranks were stopped"


def launch(nproc: int, fpt_args: list[str]) -> int:
    """`fpt train --nproc N ...`: run `fpt ...` on N local ranks through torchrun's own launcher
    (torch.distributed.run, as `torchrun --standalone --nproc-per-node N -m fpt ...`); returns
    the exit status: the first failure's (see first_failure), 128 + N for a rank killed by signal N,
    2 for a usage error (which rank 0 already printed)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, parse_args, run

    check_launch(nproc)
    # ranks share the cores instead of each spinning one thread per core against the others
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, usable_cores() // nproc)))
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
    lines = Path(tempfile.mkdtemp(prefix="fpt-ranks-"))
    os.environ[RANK_LINES_ENV] = str(lines)
    # torchrun's warnings repeat what fpt says (a signal sent, a rank failed) in a log format
    elastic = logging.getLogger("torch.distributed.elastic")
    level = elastic.level
    elastic.setLevel(logging.CRITICAL)
    # SIGHUP and SIGQUIT stay torchrun's (it stops the ranks); SIGINT and SIGTERM are _Forwarder's
    args = ["--standalone", f"--nproc-per-node={nproc}"]
    forwarder = None
    if "--signals-to-handle" in get_args_parser().format_help():  # a recent torch's; before, torchrun forwards
        args.append("--signals-to-handle=SIGHUP,SIGQUIT")
        forwarder = _Forwarder()
    try:
        run(parse_args([*args, "-m", "fpt", *fpt_args]))
    except ChildFailedError as exc:
        rank, code = first_failure(exc.failures)
        message = describe_failure(rank, code)
        if message:
            print(f"fpt: error: {message}", file=sys.stderr)
        return 128 - code if code < 0 else code  # a rank killed by signal N: the shell's 128 + N
    except SignalException:  # an older torchrun's own handling: it stopped the ranks
        raise KeyboardInterrupt from None
    finally:
        if forwarder is not None:
            forwarder.restore()
        elastic.setLevel(level)
        _repeat_other_ranks(lines)
        shutil.rmtree(lines, ignore_errors=True)
        os.environ.pop(RANK_LINES_ENV, None)
    return 0
