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
import os
import sys
from dataclasses import dataclass
from typing import Callable, NoReturn, TypeVar

import torch
import torch.distributed as dist

from fpt.errors import FptError
from fpt.runtime import usable_cores

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


def check_backend(name: str | None) -> None:
    if name is not None and name not in BACKENDS:
        raise FptError(f"unknown --ddp-backend {name!r}; choose {' or '.join(BACKENDS)}")


@dataclass(frozen=True)
class World:
    """This process's place among the ranks of a run (rank 0 of 1 without torchrun)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    owns_group: bool = False  # this World started the process group (and ends it in `stop`)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def all_reduce_sum(self, values: torch.Tensor) -> torch.Tensor:
        """The elementwise sum over ranks (in place; returned for chaining)."""
        if self.distributed:
            dist.all_reduce(values, op=dist.ReduceOp.SUM)
        return values

    def all_gather(self, value: T) -> list[T]:
        """Every rank's `value`, in rank order (pickled between our own ranks, never from a file)."""
        if not self.distributed:
            return [value]
        gathered: list = [None] * self.size
        dist.all_gather_object(gathered, value)
        return gathered

    def agree(self, on_main: Callable[[], T]) -> T:
        """Run `on_main` on rank 0 and hand its result, or its FptError, to every rank."""
        if not self.distributed:
            return on_main()
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
            raise FptError(message, kind)
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
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    owns_group = not dist.is_initialized()
    if owns_group:
        seconds = _launch_number(TIMEOUT_ENV, str(DEFAULT_TIMEOUT_S), float)
        if not 1 <= seconds <= 10**7:  # 0 fails every collective at once; timedelta overflows past ~1e14
            raise FptError(f"{TIMEOUT_ENV}={seconds:g}: give 1 to 10^7 seconds (default {DEFAULT_TIMEOUT_S})")
        timeout = datetime.timedelta(seconds=seconds)
        # No backend given: torch creates gloo for CPU tensors and, where CUDA is, nccl for GPU ones.
        dist.init_process_group(backend=backend, timeout=timeout)
    return World(rank=rank, size=size, local_rank=local_rank, owns_group=owns_group)


def stop(world: World, finished: bool = True) -> None:
    """Leave the process group if `start` joined it (the Python API may train again). After a
    normal end the ranks first wait for each other, so none tears its connections down while
    another still talks to it; after an error they do not (a peer may never arrive)."""
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
    if nproc < 1:
        raise FptError(f"--nproc must be at least 1, got {nproc}")
    if launched():
        raise FptError("--nproc starts torchrun itself; under torchrun, drop --nproc")


def launch(nproc: int, fpt_args: list[str]) -> int:
    """`fpt train --nproc N ...`: run `fpt ...` on N local ranks through torchrun's own launcher
    (torch.distributed.run, as `torchrun --standalone --nproc-per-node N -m fpt ...`); returns
    the exit status, a failed rank's own (2 for a usage error, which that rank already printed)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    check_launch(nproc)
    # ranks share the cores instead of each spinning one thread per core against the others
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, usable_cores() // nproc)))
    try:
        run(parse_args(["--standalone", f"--nproc-per-node={nproc}", "-m", "fpt", *fpt_args]))
    except ChildFailedError as exc:
        code = next((failure.exitcode for failure in exc.failures.values() if failure.exitcode), 1)
        return 128 - code if code < 0 else code  # a rank killed by signal N: the shell's 128 + N
    except SignalException:  # Ctrl-C or a kill of the launcher, which stopped the ranks
        raise KeyboardInterrupt from None
    return 0
