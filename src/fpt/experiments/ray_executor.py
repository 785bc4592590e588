"""Sweep cells as Ray tasks: `fpt sweep SPEC --executor ray` (and `fpt reproduce`) on a cluster.

Each cell is one Ray task that runs fpt.experiments.sweep.run_cell on whichever node Ray picks,
so a cell resumes from its checkpoint exactly as on one machine. The sweep folder (and the
folder the command was started in, for relative paths) must be on a filesystem every node
shares, at the same path; each node needs fpt installed.

    with RayExecutor(address="auto", cpus_per_run=4) as executor:
        run_sweep(spec, sweep_dir, executor=executor)
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from fpt.core.errors import FptError, StopRequested, require
from fpt.core.runtime import thread_budget
from fpt.experiments.cell_records import cell_run
from fpt.experiments.sweep import CellTracking, failed_row, run_cell
from fpt.experiments.sweep_spec import Cell, SweepSpec
from fpt.training.config import MAX_THREADS

PIP = "pip install 'fpt[ray]'"
# The object store only carries the cells' small rows: Ray's minimum is 75 MiB, its default a
# third of the memory, which a laptop or a shared box should not give away.
OBJECT_STORE_BYTES = 100 * 2**20
# A cell on a node that was lost runs again elsewhere, from its last checkpoint (run_cell).
MAX_RETRIES = 3
# Ray starts its workers at nice 15 so that its own servers stay responsive on a shared node. On a
# machine fpt's local Ray owns the cells are the work: at 15 any other process (a second sweep, a test
# run) takes the core first, and a cell beside one ran about 30x slower here. RAY_worker_niceness wins.
LOCAL_WORKER_NICENESS = 0


def start_local_ray(num_cpus: int | None = None) -> None:
    """A Ray instance on this machine only: its cores, no dashboard, a small object store. The
    cells' output goes to SWEEP_DIR/logs/, so workers print nothing here."""
    ray = require("ray", PIP)
    niceness = {} if "RAY_worker_niceness" in os.environ else {"worker_niceness": LOCAL_WORKER_NICENESS}
    ray.init(
        address="local",  # a new one, even where RAY_ADDRESS or a `ray start` cluster would be joined instead
        num_cpus=num_cpus or thread_budget(),  # the cores, or OMP_NUM_THREADS where smaller, as local cells
        include_dashboard=False,
        object_store_memory=OBJECT_STORE_BYTES,
        log_to_driver=False,
        logging_level=logging.WARNING,
        _system_config=niceness,  # Ray's config at start, as its docs set object spilling
    )


# A gRPC server (Ray's GCS, or its client server behind ray://) answers HTTP/2's connection preface
# with a SETTINGS frame at once: a cheap proof that Ray, not some other service, listens there.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
HTTP2_SETTINGS = 0x04
FORMS = "auto, local, HOST:PORT or ray://HOST:PORT"


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Refuse, in seconds, a Ray address that is not one of FORMS, that nothing answers at, or where
    something other than Ray (a gRPC server) listens: ray.init keeps retrying an unreachable head for
    minutes, and waits for minutes on a service that accepts the connection but never speaks gRPC."""
    if address in ("auto", "local"):
        return
    if "://" in address and not address.startswith("ray://"):
        raise FptError(f"--ray-address {address!r} is not {FORMS}")
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")  # an IPv6 host, [::1]:6379
    if not (colon and host and port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise FptError(f"--ray-address {address!r} is not {FORMS}")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as connection:
            try:
                connection.sendall(HTTP2_PREFACE)
                reply = connection.recv(9)
            except OSError:  # reset or silent past timeout_s: not a gRPC server
                reply = b""
    except OSError as exc:
        raise FptError(
            f"no Ray cluster answers at --ray-address {address} ({exc.strerror or exc}); "
            "check the address, or start one with `ray start --head`"
        ) from None
    if len(reply) < 9 or reply[3] != HTTP2_SETTINGS:
        raise FptError(
            f"something other than Ray listens at --ray-address {address} (it does not speak gRPC); give the "
            "head's GCS address (HOST:6379 by default) or its client server (ray://HOST:10001)"
        )


def _cell_on_worker(
    cwd: str, cell: Cell, spec: SweepSpec, sweep_dir: Path, cpus: int, tracking: CellTracking | None
) -> dict:
    """One cell inside a Ray worker: torch limited to the task's CPUs, and relative paths (the
    sweep folder, data_dir, npz:PATH) read as the command that started the sweep read them."""
    from fpt.core.runtime import set_threads

    set_threads(cpus)
    try:
        os.chdir(cwd)
    except OSError:
        raise FptError(f"{cwd} is not on this Ray node; start the sweep from a folder every node shares") from None
    return run_cell(cell, spec, sweep_dir, cpus, tracking)


def _stopped_on_sigterm() -> StopRequested:
    return StopRequested(
        "stopped on SIGTERM: the Ray sweep's running cells were cancelled; run the same command again "
        "to resume them from their checkpoints",
        signal.SIGTERM,
    )


@dataclass
class RayExecutor:
    """Cells as Ray tasks of `cpus_per_run` CPUs (torch threads) and `gpus_per_run` GPUs each.
    address None: a local Ray on this machine's cores (or the Ray this process already joined),
    else a cluster's ("auto": the one `ray start` made here). Use it in a `with` block."""

    address: str | None = None
    cpus_per_run: int = 1
    gpus_per_run: float = 0

    def __post_init__(self) -> None:
        if not 1 <= self.cpus_per_run <= MAX_THREADS:  # a run's torch threads
            raise FptError(f"--cpus-per-run must be 1 to {MAX_THREADS}, got {self.cpus_per_run}")
        gpus = self.gpus_per_run  # what Ray accepts: a whole number, or a share of one GPU to 4 decimals
        if not (gpus == 0 or 0.0001 <= gpus <= 1 or (1 < gpus < 1e6 and gpus == int(gpus))):
            raise FptError(
                f"--gpus-per-run must be 0, a share from 0.0001 to 1 (0.5 puts two cells on a GPU) "
                f"or a whole number, got {gpus}"
            )
        require("ray", PIP)  # before anything runs
        if self.address is not None:
            check_reachable(self.address)
        self._started = False

    def __enter__(self) -> RayExecutor:
        import ray

        self._sigterm, self._terminated = None, False
        if not ray.is_initialized():  # else: joined already (a notebook, a test), left as it is
            if threading.current_thread() is threading.main_thread():
                self._sigterm = signal.getsignal(signal.SIGTERM)
            if self._local:
                start_local_ray()
            else:
                try:
                    ray.init(address=self.address, log_to_driver=False, logging_level=logging.WARNING)
                except ConnectionError as exc:
                    raise FptError(
                        f"no Ray cluster at --ray-address {self.address} ({str(exc).splitlines()[0]}); "
                        "start one with `ray start --head`"
                    ) from None
            self._started = True
            if self._sigterm is not None:
                # ray.init's own handler exits 1 through Ray's crash report: fpt's contract is a stop
                # (the pending cells cancelled, Ray shut down, by __call__ and __exit__) and 143
                signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            self._check_a_node_fits()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    @property
    def _local(self) -> bool:
        """A Ray started here for this sweep: no address, or Ray's own "local" (a new one, not joined)."""
        return self.address in (None, "local")

    def _on_sigterm(self, signum, frame) -> None:
        self._terminated = True
        raise _stopped_on_sigterm()  # which Ray's wait turns into a plain KeyboardInterrupt: see __call__

    def _check_a_node_fits(self) -> None:
        """Ray queues a task no node can hold without a word, for ever: refuse that on this
        machine's Ray (nothing will add a node), warn on a cluster (an autoscaler may add one)."""
        import ray

        nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
        wanted = {"CPU": self.cpus_per_run, "GPU": self.gpus_per_run}
        if any(all(node.get(kind, 0) >= need for kind, need in wanted.items()) for node in nodes):
            return
        asked = f"--cpus-per-run {self.cpus_per_run}" + (
            f" --gpus-per-run {self.gpus_per_run:g}" if self.gpus_per_run else ""
        )
        largest = " and ".join(
            f"{max((node.get(kind, 0) for node in nodes), default=0):g} {kind}(s)"
            for kind, need in wanted.items()
            if need or kind == "CPU"
        )
        if self._local:
            raise FptError(f"{asked}: this machine's Ray has {largest}; ask for no more")
        print(
            f"fpt: warning: {asked}: no node of the Ray cluster has that now (the largest: {largest}); "
            "the runs wait until a node that does joins",
            file=sys.stderr,
        )

    def __exit__(self, *exc) -> None:
        import ray

        if self._started:
            ray.shutdown()
            self._started = False
        if self._sigterm is not None:
            signal.signal(signal.SIGTERM, self._sigterm)
            self._sigterm = None

    def __call__(
        self, cells: list[Cell], spec: SweepSpec, sweep_dir: Path, tracking: CellTracking | None = None
    ) -> Iterator[tuple[int, dict]]:
        import ray

        if not ray.is_initialized():
            raise FptError("use RayExecutor in a `with` block, which joins or starts Ray")
        task = ray.remote(_cell_on_worker).options(
            num_cpus=self.cpus_per_run, num_gpus=self.gpus_per_run, max_retries=MAX_RETRIES
        )
        cwd = os.getcwd()
        pending = {
            task.remote(cwd, cell, spec, sweep_dir, self.cpus_per_run, tracking): i for i, cell in enumerate(cells)
        }
        try:
            yield from self._results(pending, cells, sweep_dir)
        except KeyboardInterrupt:
            if getattr(self, "_terminated", False):
                raise _stopped_on_sigterm() from None
            raise
        finally:  # stopped early (an error, Ctrl-C, SIGTERM): the cluster's other cells stop too
            for ref in pending:
                ray.cancel(ref, force=True)

    def _results(self, pending: dict, cells: list[Cell], sweep_dir: Path) -> Iterator[tuple[int, dict]]:
        import ray

        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            index = pending.pop(ref)
            try:
                row = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:  # run_cell never raises: the node's setup did
                raise FptError(f"cell {cells[index].name}: {str(exc.cause).splitlines()[0]}") from None
            except ray.exceptions.RayError as exc:  # its node lost more than MAX_RETRIES times
                error = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                row = failed_row(cells[index], cell_run(sweep_dir, cells[index]), "crash", error)
            yield index, row

    def describe(self, parallel: int) -> str:
        """Where the runs ran, for the title of a table: the Ray cluster's address (or a local Ray), the CPUs
        and GPUs per run, and torch's version. `parallel` is unused: Ray decides how many cells run at once."""
        import torch

        gpus = f" and {self.gpus_per_run:g} GPU(s)" if self.gpus_per_run else ""
        where = f"the Ray cluster at {self.address}" if self.address else "a local Ray"
        return f"{where}, {self.cpus_per_run} CPU(s){gpus} per run, torch {torch.__version__}"
