"""Sweeps on Ray: each cell a Ray task on a local 2-CPU cluster (started once for the module),
the same results as the local executor; the flags' mistakes are one line before anything runs."""

import csv
import json
import os
import subprocess
import sys

import pytest
from helpers import wait_for

from fpt.cli import main
from fpt.core.errors import FptError
from fpt.experiments.paper import PAPER_VARIANTS
from fpt.experiments.sweep import run_sweep
from fpt.experiments.sweep_spec import load_spec


def _spec(tmp_path, backbone):
    path = tmp_path / "spec.yaml"
    path.write_text(
        f"name: tiny\ngrid:\n  task: [bit-xor]\n  seed: [0, 1]\n"
        f"options:\n  steps: 4\n  eval_every: 2\n  eval_size: 16\n  backbone: {backbone}\nparallel: 2\n"
    )
    return path


def _rows(sweep_dir):
    """results.csv less what differs between two runs of the same cells: wall times, the folder."""
    with open(sweep_dir / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        assert row.pop("wall_time_s")
        row["run_dir"] = os.path.relpath(row["run_dir"], sweep_dir)
    return rows


@pytest.fixture(scope="module")
def local_ray():
    """About 10 s to start: once for the module, 2 CPUs, no dashboard, a small object store."""
    import ray

    from fpt.experiments.ray_executor import start_local_ray

    start_local_ray(num_cpus=2)
    yield ray
    ray.shutdown()


LOCAL_RAY_PROBE = """
import os, ray
from fpt.experiments.ray_executor import start_local_ray
start_local_ray(num_cpus=1)
print(ray.get(ray.remote(lambda: os.nice(0)).remote()), os.nice(0))
"""


@pytest.mark.slow
def test_a_local_ray_is_a_new_one_at_normal_priority(tmp_path):
    """Started anew even where RAY_ADDRESS names a cluster (ray.init would join it, and refuse num_cpus),
    its workers at this process's priority: Ray's default nice 15 let any other process take their core."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_worker_niceness"}
    env["RAY_ADDRESS"] = "127.0.0.1:1"  # nothing listens there
    done = subprocess.run(
        [sys.executable, "-c", LOCAL_RAY_PROBE], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    worker, driver = done.stdout.split()[-2:]
    assert worker == driver  # 0, unless the tests themselves run under nice


@pytest.mark.slow
def test_runs_no_node_can_hold_are_refused_here_and_waited_for_on_a_cluster(local_ray, capsys):
    from fpt.experiments.ray_executor import RayExecutor

    for address in (None, "local"):  # "local": Ray's word for a new one on this machine
        with pytest.raises(FptError, match=r"--cpus-per-run 3: this machine's Ray has 2 CPU\(s\); ask for no more"):
            with RayExecutor(address=address, cpus_per_run=3):
                pass
    with pytest.raises(FptError, match=r"--gpus-per-run 1: this machine's Ray has 2 CPU\(s\) and 0 GPU\(s\)"):
        with RayExecutor(gpus_per_run=1):
            pass
    with RayExecutor(cpus_per_run=2):  # fits: no word
        pass
    assert capsys.readouterr().err == ""
    on_a_cluster = RayExecutor(cpus_per_run=8)
    on_a_cluster.address = "head:6379"  # as if joined to a cluster (an autoscaler may add a node)
    with on_a_cluster:
        pass
    assert "no node of the Ray cluster has that now (the largest: 2 CPU(s))" in capsys.readouterr().err
    assert local_ray.is_initialized()  # joined, not started, by these executors: left running


@pytest.mark.slow
def test_ray_runs_each_cell_as_a_task_and_writes_the_local_results(local_ray, tiny_gpt2, tmp_path, monkeypatch):
    from fpt.experiments import ray_executor, sweep

    spec = _spec(tmp_path, tiny_gpt2)
    monkeypatch.setattr(sweep, "thread_budget", lambda: 2)  # local threads 2 // parallel 2 = 1, as Ray's 1 CPU per run
    assert main(["sweep", str(spec), "--out", str(tmp_path / "local"), "--no-progress"]) == 0

    def in_this_process(*args):
        raise AssertionError("a cell ran in the driver, not in a Ray worker")

    monkeypatch.setattr(sweep, "run_cell", in_this_process)
    monkeypatch.setattr(ray_executor, "run_cell", in_this_process)
    monkeypatch.chdir(tmp_path)  # a relative --out is read in the driver's folder, not the worker's
    assert (
        main(["sweep", "spec.yaml", "--out", "ray", "--executor", "ray", "--cpus-per-run", "1", "--no-progress"]) == 0
    )
    assert local_ray.is_initialized()  # joined, not started, by the command: left running

    rows = _rows(tmp_path / "ray")
    assert [r["status"] for r in rows] == ["done", "done"] and [r["seed"] for r in rows] == ["0", "1"]
    assert rows == _rows(tmp_path / "local")
    assert (tmp_path / "ray" / "results.md").read_text() == (tmp_path / "local" / "results.md").read_text()
    config = json.loads((tmp_path / "ray" / "runs" / "task=bit-xor,seed=1" / "config.json").read_text())
    assert config["threads"] == 1 and config["seed"] == 1

    # a cell lost after its step-2 checkpoint... is resumed from it on the next run, the other left alone
    monkeypatch.undo()
    cell = tmp_path / "ray" / "runs" / "task=bit-xor,seed=0"
    (cell / "summary.json").unlink()
    done = tmp_path / "ray" / "runs" / "task=bit-xor,seed=1" / "summary.json"
    before = done.stat().st_mtime_ns
    with ray_executor.RayExecutor() as executor:
        rows = run_sweep(load_spec(spec, PAPER_VARIANTS), tmp_path / "ray", progress=False, executor=executor)
    assert [r["status"] for r in rows] == ["done", "done"]
    assert json.loads((cell / "summary.json").read_text())["resumed_from_step"] == 4
    assert done.stat().st_mtime_ns == before


@pytest.mark.parametrize(
    "flags, names",
    [
        (["--ray-address", "auto"], ["--ray-address", "--executor ray"]),
        (["--cpus-per-run", "2"], ["--cpus-per-run", "--executor ray"]),
        (["--executor", "ray", "--cpus-per-run", "0"], ["--cpus-per-run", "1 to 1024"]),
        (["--executor", "ray", "--cpus-per-run", "2000"], ["--cpus-per-run", "1 to 1024"]),
        (["--executor", "ray", "--gpus-per-run", "-1"], ["--gpus-per-run", "must be 0, a share"]),
        (["--executor", "ray", "--gpus-per-run", "nan"], ["--gpus-per-run", "got nan"]),
        (["--executor", "ray", "--gpus-per-run", "0.00001"], ["--gpus-per-run", "0.0001 to 1"]),
        (["--executor", "ray", "--gpus-per-run", "1.5"], ["--gpus-per-run", "whole number"]),
        # nothing listens on port 1 here (a privileged port no test machine serves)
        (["--executor", "ray", "--ray-address", "127.0.0.1:1"], ["--ray-address 127.0.0.1:1", "no Ray cluster"]),
        (["--executor", "ray", "--ray-address", "headnode"], ["--ray-address 'headnode'", "HOST:PORT"]),
    ],
)
@pytest.mark.parametrize("command", ["sweep", "reproduce"])
def test_bad_executor_flags_are_one_line_before_anything_runs(tmp_path, capsys, flags, names, command):
    target = str(_spec(tmp_path, "minilm")) if command == "sweep" else "table1"
    assert main([command, target, "--out", str(tmp_path / "out"), *flags]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and all(name in error for name in names), error
    assert not (tmp_path / "out").exists()


def test_without_ray_the_error_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    assert main(["sweep", str(_spec(tmp_path, "minilm")), "--out", str(tmp_path / "out"), "--executor", "ray"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "pip install 'fpt[ray]'" in error, error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "address, refused",
    [
        ("auto", None),
        ("local", None),
        ("anyscale://cluster", "is not auto"),  # refused in one line, not Ray's traceback
        ("http://127.0.0.1:8265", "is not auto"),  # the dashboard's (job submission) address
        ("headnode:99999", "is not auto"),
        ("headnode:", "is not auto"),
        (":6379", "is not auto"),
        ("headnode:6379x", "is not auto"),
        ("127.0.0.1:1", "no Ray cluster"),
        ("ray://127.0.0.1:1", "no Ray cluster"),
        ("[::1]:1", "no Ray cluster"),
    ],
)
def test_ray_address_is_checked_without_ray(address, refused):
    from fpt.core.errors import FptError
    from fpt.experiments.ray_executor import check_reachable

    if refused is None:
        check_reachable(address, timeout_s=0.5)
    else:
        with pytest.raises(FptError, match=refused):
            check_reachable(address, timeout_s=0.5)


def test_a_grpc_server_passes_and_something_else_listening_is_refused_in_seconds():
    import socket
    import threading
    import time
    from concurrent import futures

    import grpc

    from fpt.experiments.ray_executor import check_reachable

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))  # as Ray's GCS and client server
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        check_reachable(f"127.0.0.1:{port}")
        check_reachable(f"ray://127.0.0.1:{port}")
    finally:
        server.stop(None)
    for reply in (b"", b"HTTP/1.1 400 Bad Request\r\n\r\n"):  # a silent service, a web server
        with socket.socket() as other:
            other.bind(("127.0.0.1", 0))
            other.listen()

            def answer(listener=other, reply=reply):
                connection, _ = listener.accept()
                connection.sendall(reply)
                time.sleep(3)
                connection.close()

            threading.Thread(target=answer, daemon=True).start()
            started = time.monotonic()
            with pytest.raises(FptError, match="something other than Ray listens"):
                check_reachable(f"127.0.0.1:{other.getsockname()[1]}", timeout_s=1.0)
            assert time.monotonic() - started < 5  # ray.init: minutes


@pytest.mark.slow
def test_sigterm_to_a_ray_sweep_stops_it_with_143_in_one_line(tiny_gpt2, tmp_path):
    import signal
    import subprocess

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"name: tiny\ngrid:\n  task: [bit-xor]\n  seed: [0]\n"
        f"options:\n  steps: 100000\n  eval_every: 2\n  eval_size: 16\n  backbone: {tiny_gpt2}\nparallel: 1\n"
    )
    out = tmp_path / "sweep"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "fpt", "sweep", str(spec), "--out", str(out), "--executor", "ray"]
    driver = subprocess.Popen([*command, "--no-progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: bool(list(out.glob("runs/*/metrics.jsonl"))), driver, "no cell trained in a Ray worker")
    driver.send_signal(signal.SIGTERM)
    try:
        _, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()  # a driver that ignored SIGTERM must not outlive its test
    err = err.decode()
    assert driver.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "fpt: stopped on SIGTERM" in err and "Traceback" not in err, err[-3000:]
