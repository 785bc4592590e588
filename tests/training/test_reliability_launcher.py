"""`fpt train --nproc N` and ranks under hostile or unlucky launches (issue 35): the ranks die with
their launcher, one Ctrl-C is one request, a failed rank is reported truthfully, stray launch
variables and a peer that never comes end in one line."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import train_argv, wait_for
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from fpt.cli import main
from fpt.core.errors import FptError
from fpt.training.checkpoint import load_checkpoint
from fpt.training.distributed import check_backend, describe_failure, first_failure
from fpt.training.run_dir import RunDir

TASK = ["--task", "bit-xor", "--n-bits", "8", "--eval-size", "100", "--batch-size", "8"]


def _env(**extra) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **extra}


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(child) for child in found]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")  # a zombie is dead


@pytest.fixture
def start_training():
    """_start_training, and when the test ends, passed or failed, each such run's whole process group
    killed: a 100,000-step two-rank run must not outlive a failed assertion."""
    started: list[subprocess.Popen] = []
    yield lambda backbone, out: _start_training(backbone, out, started)
    for launcher in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=30)


def _start_training(backbone: str, out: Path, started: list) -> subprocess.Popen:
    """A long two-rank run in its own session (as a terminal's job: Ctrl-C goes to its group),
    returned once its first evaluation is written; appended to `started` as soon as it exists."""
    command = [sys.executable, "-m", "fpt", "train", *TASK, "--backbone", backbone, "--steps", "100000"]
    command += ["--eval-every", "2", "--out", str(out), "--nproc", "2", "--no-progress"]
    launcher = subprocess.Popen(
        command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    started.append(launcher)
    wait_for(
        lambda: (out / RunDir.METRICS).exists() and len(_children(launcher.pid)) >= 2,
        launcher,
        "the two ranks did not write a first evaluation",
    )
    return launcher


def _metrics_steps(out: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (out / RunDir.METRICS).read_text().splitlines()]


@pytest.mark.slow
def test_ranks_die_with_a_killed_launcher_and_the_run_resumes_at_once(tiny_gpt2, tmp_path, start_training):
    out = tmp_path / "run"
    launcher = start_training(tiny_gpt2, out)
    ranks = _children(launcher.pid)
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.communicate(timeout=60)
    deadline = time.monotonic() + 60  # the watchdog's SIGTERM, then its kill ORPHAN_GRACE_S (30 s) later
    while any(_alive(pid) for pid in ranks):
        assert time.monotonic() < deadline, "ranks outlived their launcher"
        time.sleep(0.2)
    # the ranks stopped as on SIGTERM: the step under way finished and was saved
    saved = load_checkpoint(out / RunDir.CHECKPOINT).step
    assert saved >= max(_metrics_steps(out))
    # nothing holds the run's lock: a resume would be accepted at once
    run = RunDir(out)
    run.lock()  # raises "in use by another fpt process" while a rank still holds it
    run.unlock()


@pytest.mark.slow
def test_one_ctrl_c_at_a_terminal_is_one_request(tiny_gpt2, tmp_path, start_training):
    out = tmp_path / "run"
    launcher = start_training(tiny_gpt2, out)
    os.killpg(launcher.pid, signal.SIGINT)  # what a terminal does: the whole foreground process group
    _, err = launcher.communicate(timeout=180)
    assert launcher.returncode == 130, err[-3000:]
    # taken as one request: the step under way finished and was saved (not "asked twice": stop at once)
    assert "stopping once the step under way is done" in err and "interrupted" not in err, err
    assert f"checkpoint saved; continue with `fpt train --resume {out}`" in err, err
    assert "Sending process" not in err and "torch.distributed" not in err, err  # no torchrun log lines
    assert err.count("stopping once the step under way is done") == 1, err


@pytest.mark.slow
def test_a_rank_killed_by_a_signal_is_reported_with_its_rank_and_signal(tiny_gpt2, tmp_path, start_training):
    out = tmp_path / "run"
    launcher = start_training(tiny_gpt2, out)
    rank_one = next(  # RANK is in the rank's environment
        pid for pid in _children(launcher.pid) if b"RANK=1\0" in Path(f"/proc/{pid}/environ").read_bytes()
    )
    os.kill(rank_one, signal.SIGKILL)
    _, err = launcher.communicate(timeout=180)
    assert launcher.returncode == 128 + signal.SIGKILL, err[-3000:]
    assert "fpt: error: rank 1 was killed by SIGKILL" in err, err
    assert err.count("fpt: error:") <= 2 and "ChildFailedError" not in err and "Traceback" not in err, err


def _failure(rank: int, exitcode: int) -> ProcessFailure:
    failure = ProcessFailure(local_rank=rank, pid=1000 + rank, exitcode=exitcode, error_file="")
    failure.timestamp = 1_700_000_000  # torchrun's are whole seconds: failures found in one poll tie
    return failure


@pytest.mark.parametrize(
    "codes, expected",
    [
        ({0: 2, 1: -9}, (1, -9)),  # rank 0 left on its peer's death with status 2, listed first by torchrun
        ({0: -9, 1: -6}, (0, -9)),  # two signals: the lower rank, as the timestamps tie within a second
        ({0: -15, 1: -9}, (1, -9)),  # SIGTERM is torchrun stopping a survivor: seen under load in the suite
        ({0: -15, 1: 1}, (1, 1)),  # a crash, torchrun's SIGTERM to the other rank
        ({0: -15, 1: -15}, (0, -15)),  # every rank terminated from outside: the lowest
        ({0: 143, 1: 1}, (1, 1)),  # a crash before a rank that stopped on request
        ({1: 2, 0: 2}, (0, 2)),  # a usage error every rank raised: rank 0's, which printed it
    ],
)
def test_the_first_failure_is_the_cause_not_torchruns_first_listed(codes, expected):
    assert first_failure({rank: _failure(rank, code) for rank, code in codes.items()}) == expected


def test_a_failure_is_described_truthfully_once():
    assert describe_failure(1, -9) == ("rank 1 was killed by SIGKILL; the other ranks were stopped (exit status 137)")
    assert "rank 0 failed with exit status 3" in describe_failure(0, 3)
    assert describe_failure(0, 2) is None and describe_failure(0, 130) is None  # the rank said it itself


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    "variables, words",
    [
        ({"WORLD_SIZE": "2", "RANK": "0"}, "no MASTER_ADDR"),
        ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "abc"}, "MASTER_PORT='abc'"),
        ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "70000"}, "MASTER_PORT='70000'"),
        ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1"}, "MASTER_PORT=''"),
    ],
)
def test_stray_launch_variables_are_one_line(tiny_gpt2, tmp_path, capsys, monkeypatch, variables, words):
    for name in ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert main(["train", "--task", "bit-xor", "--backbone", tiny_gpt2, "--out", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and words in error, error
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("rank", ["0", "1"])  # rank 0 serves the store and waits; rank 1 finds no server
def test_a_peer_that_never_comes_is_said_at_once_and_ends_in_one_line(tiny_gpt2, tmp_path, rank):
    env = _env(WORLD_SIZE="2", RANK=rank, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    env["FPT_DDP_TIMEOUT_S"] = "4"
    command = [sys.executable, "-m", "fpt", "train", "--task", "bit-xor", "--backbone", tiny_gpt2]
    done = subprocess.run(
        [*command, "--out", str(tmp_path / "run")], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 2, done.stderr[-3000:]  # no C++ log lines, no DistStoreError traceback
    assert f"rank {rank} is waiting for all 2 ranks" in lines[0] and "up to 4 s" in lines[0]
    assert lines[1].startswith("fpt: error:") and "not all 2 ranks joined" in lines[1], lines
    assert not (tmp_path / "run").exists()


def test_nccl_where_it_cannot_run_is_one_line(tiny_gpt2, tmp_path, capsys):
    if torch.distributed.is_nccl_available() and torch.cuda.is_available():
        with pytest.raises(FptError, match="not --device cpu"):
            check_backend("nccl", "cpu")
        return
    args = ["train", "--task", "bit-xor", "--backbone", tiny_gpt2, "--out", str(tmp_path / "run")]
    assert main([*args, "--ddp-backend", "nccl", "--nproc", "2"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--ddp-backend nccl needs CUDA GPUs" in error, error
    assert not (tmp_path / "run").exists()
    with pytest.raises(FptError, match="needs CUDA GPUs"):
        check_backend("nccl", "cpu")


@pytest.mark.slow
def test_an_error_rank_0_hands_to_every_rank_is_printed_once(tiny_gpt2, tmp_path):
    pytest.importorskip("mlflow")
    (tmp_path / "db").mkdir()  # a tracker store that is a folder: found by rank 0 inside the ranks, handed to rank 1
    argv = train_argv(tiny_gpt2, tmp_path / "run", "--steps", "2", "--nproc", "2", "--report-to", "mlflow")
    done = subprocess.run(
        [sys.executable, "-m", "fpt", *argv, "--tracking-uri", f"sqlite:///{tmp_path / 'db'}"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("fpt: error: ")]
    assert done.returncode == 2 and len(errors) == 1 and "is a folder" in errors[0], done.stderr[-3000:]
