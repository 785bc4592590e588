"""Data-parallel training under torchrun (gloo, 2 ranks on this machine): the ranks compute what
one process computes, evaluate the split once, resume bit-identically, and fail as one job."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import save_tiny

from fpt.cli import main
from fpt.training.build import build
from fpt.training.checkpoint import load_checkpoint
from fpt.training.config import TrainConfig
from fpt.training.evaluation import evaluate
from fpt.training.lifecycle import load_run, train
from fpt.training.loop import Trainer
from fpt.training.run_dir import RunDir

WORKER = str(Path(__file__).parents[1] / "ddp_worker.py")
# fp32 outright: conftest pins --precision auto to fp32 in this process only, and a subprocess on a CPU
# with native bf16 would train in bf16, unlike the in-process runs it is compared with
TASK = ["--task", "bit-xor", "--n-bits", "8", "--eval-size", "100", "--batch-size", "8", "--precision", "fp32"]


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def _run(command: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=timeout)


def _fpt(*args: str) -> subprocess.CompletedProcess:
    done = _run([sys.executable, "-m", "fpt", *args])
    assert done.returncode == 0, done.stderr[-6000:]
    return done


def _torchrun(*args: str, nproc: int = 2) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args])


def _trained(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run_dir / RunDir.CHECKPOINT).params


def _one_process(backbone: str, out: Path, **overrides) -> Path:
    config = TrainConfig(
        task="bit-xor", task_options={"n_bits": 8, "eval_size": 100}, backbone=backbone, batch_size=8, **overrides
    )
    return train(config, out=out, progress=False)[1]


@pytest.mark.slow
def test_two_ranks_compute_what_one_process_computes(tiny_gpt2, tmp_path):
    single = _one_process(tiny_gpt2, tmp_path / "single", steps=6, eval_every=3, dropout=0.0)
    _fpt(
        "train",
        *TASK,
        "--backbone",
        tiny_gpt2,
        "--steps",
        "6",
        "--eval-every",
        "3",
        "--dropout",
        "0",
        "--out",
        str(tmp_path / "ranks"),
        "--nproc",
        "2",
        "--no-progress",
        "--report-to",
        "tensorboard",
    )
    one, two = _trained(single), _trained(tmp_path / "ranks")
    assert set(one) == set(two)
    for name in one:
        assert torch.allclose(one[name], two[name], atol=1e-5), name
    start = _trained_at_start(tiny_gpt2)
    assert any(not torch.equal(start[name], two[name]) for name in two)  # it trained
    summary = json.loads((tmp_path / "ranks" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["step"] == 6
    # only rank 0 wrote and tracked, once: one metrics line and one tracked value per evaluation
    assert [json.loads(line)["step"] for line in (tmp_path / "ranks" / "metrics.jsonl").read_text().splitlines()] == [
        3,
        6,
    ]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "ranks" / "tb"))
    events.Reload()
    assert [e.step for e in events.Scalars("accuracy")] == [3, 6]


def _trained_at_start(backbone: str) -> dict[str, torch.Tensor]:
    _, model = build(TrainConfig(task="bit-xor", task_options={"n_bits": 8, "eval_size": 100}, backbone=backbone))
    return model.trainable_state()


@pytest.mark.slow
def test_split_evaluation_scores_every_example_once(tiny_gpt2, tmp_path):
    run = _one_process(tiny_gpt2, tmp_path / "run", steps=4, eval_every=4)
    _, task, model, _ = load_run(run)
    alone = evaluate(model, task, batch_size=16, confusion=True)
    done = _torchrun(WORKER, "evaluate", str(tmp_path / "split.json"), str(run))
    assert done.returncode == 0, done.stderr[-6000:]
    split = json.loads((tmp_path / "split.json").read_text())
    assert split["examples"] == alone["examples"] == 100  # 7 batches of 16, 4 on rank 0 and 3 on rank 1
    assert split["accuracy"] == alone["accuracy"] and split["confusion"] == alone["confusion"]
    assert split["loss"] == pytest.approx(alone["loss"], rel=1e-6)


@pytest.mark.slow
def test_a_resumed_two_rank_run_ends_bit_identical(tiny_gpt2, tmp_path):
    # dropout on: each rank's own RNG state must come back from the checkpoint
    common = [*TASK, "--backbone", tiny_gpt2, "--eval-every", "2", "--nproc", "2", "--no-progress"]
    _fpt("train", *common, "--steps", "4", "--out", str(tmp_path / "straight"))
    _fpt("train", *common, "--steps", "2", "--out", str(tmp_path / "stopped"))
    _fpt("train", "--resume", str(tmp_path / "stopped"), "--steps", "4", "--nproc", "2", "--no-progress")
    a = load_checkpoint(tmp_path / "straight" / RunDir.CHECKPOINT)
    b = load_checkpoint(tmp_path / "stopped" / RunDir.CHECKPOINT)
    assert a.step == b.step == 4 and a.world_size == b.world_size == 2
    assert not torch.equal(a.rng_states[0].cpu, a.rng_states[1].cpu)  # ranks draw different dropout masks
    for name in a.params:
        assert torch.equal(a.params[name], b.params[name]), name
    for rank in range(2):
        assert torch.equal(a.rng_states[rank].cpu, b.rng_states[rank].cpu)


@pytest.mark.slow
def test_resuming_with_another_world_size_is_refused_in_one_line(tiny_gpt2, tmp_path, capsys):
    _fpt(
        "train",
        *TASK,
        "--backbone",
        tiny_gpt2,
        "--steps",
        "2",
        "--eval-every",
        "2",
        "--nproc",
        "2",
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
    )
    before = (tmp_path / "run" / RunDir.CHECKPOINT).read_bytes()
    for extra in ([], ["--nproc", "3"]):
        assert main(["train", "--resume", str(tmp_path / "run"), "--steps", "4", *extra]) == 2
        error = capsys.readouterr().err
        assert "saved by a run on 2 process(es)" in error and error.count("\n") == 1
    assert (tmp_path / "run" / RunDir.CHECKPOINT).read_bytes() == before


@pytest.mark.slow
def test_two_nodes_on_one_machine_meet_through_c10d(tiny_gpt2, tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    single = _one_process(tiny_gpt2, tmp_path / "single", steps=4, eval_every=4, dropout=0.0)
    node = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=fpt-test",
        "-m",
        "fpt",
        "train",
        *TASK,
        "--backbone",
        tiny_gpt2,
        "--steps",
        "4",
        "--eval-every",
        "4",
        "--dropout",
        "0",
        "--out",
        str(tmp_path / "nodes"),
        "--no-progress",
    ]
    nodes = [
        subprocess.Popen(node, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outputs = [process.communicate(timeout=180) for process in nodes]
    assert [process.returncode for process in nodes] == [0, 0], [err[-1500:] for _, err in outputs]
    one, two = _trained(single), _trained(tmp_path / "nodes")
    for name in one:
        assert torch.allclose(one[name], two[name], atol=1e-5), name


@pytest.mark.slow
def test_ranks_with_different_backbones_are_refused_before_the_run_directory(tiny_gpt2, tmp_path):
    other = save_tiny("gpt2", tmp_path / "other", seed=99)
    done = _torchrun(WORKER, "backbones", str(tmp_path / "run"), tiny_gpt2, other, *TASK, "--steps", "2")
    assert done.returncode != 0
    assert "ranks 0 and 1 have different backbone weights" in done.stderr
    assert "Traceback" not in done.stderr.split("fpt: error:")[1].split("\n")[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_crashed_rank_ends_the_whole_job_instead_of_hanging(tiny_gpt2, tmp_path):
    done = _torchrun(WORKER, "crash", str(tmp_path / "run"), tiny_gpt2)  # bounded by _run's timeout
    assert done.returncode != 0


@pytest.mark.slow
def test_ranks_stop_together_on_one_ranks_sigterm_and_resume_bit_identical(tiny_gpt2, tmp_path):
    # only rank 1 is signalled (after step 3): the ranks agree in step 4's all-reduce and both stop there
    assert _torchrun(WORKER, "sigterm", str(tmp_path / "straight"), tiny_gpt2, "-1").returncode == 0
    assert _torchrun(WORKER, "sigterm", str(tmp_path / "stopped"), tiny_gpt2, "1").returncode != 0
    stopped = load_checkpoint(tmp_path / "stopped" / RunDir.CHECKPOINT)
    assert stopped.step == 4 and stopped.world_size == 2
    _fpt("train", "--resume", str(tmp_path / "stopped"), "--nproc", "2", "--no-progress")
    a, b = _trained(tmp_path / "straight"), _trained(tmp_path / "stopped")
    assert all(torch.equal(a[name], b[name]) for name in a)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--batch-size", "7", "--nproc", "2"], ["--batch-size 7", "multiple of 2"]),
        (["--nproc", "0"], ["--nproc must be at least 1"]),
        (["--ddp-backend", "mpi"], ["unknown --ddp-backend 'mpi'"]),
        (["--device", "cuda:7", "--nproc", "2"], ["--device cuda:7 is not on this machine"]),
    ],
)
def test_bad_launches_are_one_line_before_anything_runs(tiny_gpt2, tmp_path, capsys, args, words):
    if "cuda:7" in args and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    assert main(["train", "--task", "bit-xor", "--backbone", tiny_gpt2, "--out", str(tmp_path / "run"), *args]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and all(word in error for word in words), error
    assert not (tmp_path / "run").exists()


def test_sweeps_and_nested_launches_are_refused_under_torchrun(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    (tmp_path / "spec.yaml").write_text("grid: {task: [bit-xor]}\n")
    assert main(["sweep", str(tmp_path / "spec.yaml"), "--out", str(tmp_path / "sweep")]) == 2
    assert "without torchrun" in capsys.readouterr().err
    assert main(["train", "--task", "bit-xor", "--nproc", "2"]) == 2
    assert "drop --nproc" in capsys.readouterr().err
    assert not (tmp_path / "sweep").exists()


def test_a_rank_number_without_a_world_is_the_main_process(monkeypatch):
    from fpt.training.distributed import is_main_process

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("RANK", "1")  # left over in a shell: one process still prints its results
    assert is_main_process()
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert not is_main_process()


def test_launch_variables_that_are_not_counts_are_one_line(tiny_gpt2, tmp_path, capsys, monkeypatch):
    env = {**os.environ, "WORLD_SIZE": ""}
    done = subprocess.run([sys.executable, "-m", "fpt", "backbones"], env=env, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "WORLD_SIZE=''" in done.stderr, done.stderr
    train = ["train", "--task", "bit-xor", "--backbone", tiny_gpt2, "--out", str(tmp_path / "run")]
    for variables, words in (
        ({"WORLD_SIZE": "2"}, "no RANK"),
        ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "x"}, "LOCAL_RANK='x'"),
        ({"WORLD_SIZE": "2", "RANK": "0", "FPT_DDP_TIMEOUT_S": "abc"}, "FPT_DDP_TIMEOUT_S"),
        ({"WORLD_SIZE": "2", "RANK": "0", "FPT_DDP_TIMEOUT_S": "0"}, "1 to 10^7 seconds"),
        ({"WORLD_SIZE": "2", "RANK": "2"}, "RANK=2 with WORLD_SIZE=2"),
    ):
        for name in ("RANK", "LOCAL_RANK", "FPT_DDP_TIMEOUT_S"):
            monkeypatch.delenv(name, raising=False)
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        assert main(train) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and words in error, error
        assert not (tmp_path / "run").exists()


def test_the_fp16_loss_scale_is_checkpointed_and_resumed(tiny_gpt2, tmp_path):
    # fp16 runs on CUDA only; the scaler's bookkeeping is the same on the CPU, tested here
    config = TrainConfig(
        task="bit-xor",
        task_options={"n_bits": 8, "eval_size": 20},
        backbone=tiny_gpt2,
        steps=4,
        eval_every=2,
        batch_size=4,
        dropout=0.0,
    )
    task, model = build(config)
    config.precision = "fp16"
    trainer = Trainer(model, task, config, RunDir.create(tmp_path / "run"), progress=False)
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)  # a scale that differs from the default
    trainer.fit()
    saved = load_checkpoint(tmp_path / "run" / RunDir.CHECKPOINT)
    assert saved.grad_scaler["scale"] == trainer.scaler.get_scale() == 1024.0
    task, model = build(TrainConfig(**{**config.__dict__, "precision": "fp32"}))
    again = Trainer(model, task, config, progress=False)
    again.load(saved, tmp_path / "run" / RunDir.CHECKPOINT, resuming=True)
    assert again.scaler.get_scale() == 1024.0


def test_fp16_is_refused_off_cuda(tiny_gpt2, tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("CUDA is here")
    assert (
        main(
            [
                "train",
                "--task",
                "bit-xor",
                "--backbone",
                tiny_gpt2,
                "--precision",
                "fp16",
                "--device",
                "cpu",
                "--out",
                str(tmp_path / "run"),
            ]
        )
        == 2
    )
    assert "fp16 (with a loss scaler) is for CUDA GPUs" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_rank_leaves_with_its_status_after_atexit_handlers_and_flushed_output():
    # exit_rank skips the native teardown (os._exit, so no SystemExit to catch), which would also drop
    # Python's exit work: buffered output (stdout and stderr are pipes here, the partial line stays
    # buffered) and atexit handlers such as a tracker's must still run
    script = (
        "import atexit, sys\nfrom fpt.training.distributed import exit_rank\n"
        "atexit.register(lambda: print('handler ran'))\nprint('buffered', end=' ')\n"
        "sys.stderr.write('partial')\n"
        "try:\n    exit_rank(7)\nexcept SystemExit:\n    print('raised instead')\n"
    )
    env = {key: value for key, value in _env().items() if key != "PYTHONUNBUFFERED"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 7 and done.stdout == "buffered handler ran\n", (done.stdout, done.stderr)
    assert done.stderr == "partial"


@pytest.mark.parametrize("failure, status, traced", [(RuntimeError("a bug"), 1, True), (SystemExit(2), 2, False)])
def test_a_rank_whose_main_raises_still_leaves_through_exit_rank(failure, status, traced, monkeypatch, capsys):
    # a bug (its traceback, status 1) or argparse's usage error (status 2): exit_rank either way
    from fpt import cli

    def failing(argv=None):
        raise failure

    statuses = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(cli, "main", failing)
    monkeypatch.setattr(cli.distributed, "exit_rank", statuses.append)
    cli.entry()
    said = capsys.readouterr().err
    assert statuses == [status] and ("Traceback" in said) == traced and ("RuntimeError: a bug" in said) == traced


@pytest.mark.slow
def test_an_error_every_rank_meets_is_said_once_and_one_rank_alone_meets_is_said_with_its_rank(tmp_path, capsys):
    from fpt.training.distributed import RANK_LINES_ENV, _repeat_other_ranks

    done = _run([sys.executable, "-m", "fpt", "train", "--task", f"npz:{tmp_path / 'none.npz'}", "--nproc", "2"])
    errors = [line for line in done.stderr.splitlines() if line.startswith("fpt: error:")]
    assert done.returncode == 2 and len(errors) == 1 and "no such .npz file" in errors[0], done.stderr
    assert RANK_LINES_ENV not in os.environ
    # what the launcher repeats: a line rank 0 did not say, once, with the rank that said it
    (tmp_path / "rank-0.txt").write_text("fpt: stopped at step 22\n")
    (tmp_path / "rank-1.txt").write_text("fpt: stopped at step 22\nfpt: error: out of memory on cuda:1\n")
    (tmp_path / "rank-2.txt").write_text("fpt: error: out of memory on cuda:1\n")
    _repeat_other_ranks(tmp_path)
    assert capsys.readouterr().err == "fpt: error: out of memory on cuda:1 (rank 1)\n"
