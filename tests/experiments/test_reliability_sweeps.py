"""Hostile sweep specs and `fpt reproduce` options: YAML bombs, grids too large, values of the wrong
type, files that are not specs, cell keys where options go. Each is refused in one line before
anything runs. A sweep killed by a signal takes its running cell with it; one asked to stop (SIGTERM,
Ctrl-C) pauses it with a checkpoint and a logged sitting, and begins no other cell. A sweep or a
reproduction loads what its last step imports before it trains anything."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import one_line_error

from fpt.cli import main

# 9^8 = 43 million leaves if expanded; refused at the first nested value instead
ALIAS_BOMB = """grid:
  task: [bit-xor]
  seed: [&a [0, 0, 0, 0, 0, 0, 0, 0, 0], &b [*a, *a, *a, *a, *a, *a, *a, *a, *a],
         &c [*b, *b, *b, *b, *b, *b, *b, *b, *b], &d [*c, *c, *c, *c, *c, *c, *c, *c, *c],
         &e [*d, *d, *d, *d, *d, *d, *d, *d, *d], &f [*e, *e, *e, *e, *e, *e, *e, *e, *e],
         &g [*f, *f, *f, *f, *f, *f, *f, *f, *f], [*g, *g, *g, *g, *g, *g, *g, *g, *g]]
"""


@pytest.mark.parametrize(
    "text, words",
    [
        (ALIAS_BOMB, "seed must be int"),
        ("grid:\n  task: [bit-xor]\n  seed: *s\n", "not valid YAML"),
        (
            "grid:\n  task: [bit-xor]\n  seed: "
            + str(list(range(200)))
            + "\n  lr: "
            + str([0.001 * i for i in range(1, 101)])
            + "\n",
            "20,000 cells",
        ),
        ("grid:\n  task: [bit-xor]\nparallel: 0\n", "'parallel' must be an integer from 1"),
        ("grid:\n  task: [bit-xor]\nparallel: 100000\n", "'parallel' must be an integer from 1"),
        ("grid:\n  task: [bit-xor]\noptions:\n  steps: many\n", "steps must be int"),
        ("grid:\n  task: [bit-xor]\n  seed: [[0, 1]]\n", "seed must be int"),
        ("grid:\n  task: [bit-xor]\noptions:\n  augment: 3\n", "augment must be bool"),
        ("grid:\n  task: [bit-xor]\noptions: [steps, 5]\n", "'options' must map"),
        ("name: 2024-05-01\ngrid:\n  task: [bit-xor]\n", "'name' must be a string"),
        ("<<: {grid: {task: [bit-xor]}}\n", "not merged in"),
        ("grid:\n  task: [bit-xor]\n  lr: [0.001, -1]\n", "cell task=bit-xor,lr=-1: --lr must be a positive number"),
        ("grid:\n  task: [bit-xor]\noptions:\n  eval_every: 0\n", "--eval-every must be at least 1"),
        ("grid:\n  task: [bit-xor]\noptions:\n  threads: 4294967297\n", "--threads must be 1 to 1024"),
        # an alias bomb is quoted in a line, not expanded (its repr: gigabytes, minutes)
        (
            "name: " + ALIAS_BOMB.split("seed: ")[1].replace("\n", " ") + "\ngrid:\n  task: [bit-xor]\n",
            "'name' must be",
        ),
        ("grid:\n  task: [bit-xor]\noptions:\n  lr: " + ALIAS_BOMB.split("seed: ")[1], "lr must be int or float"),
        # a task's options, checked for every cell before the first one starts
        ("grid:\n  task: [ett]\n  lookback: [96, -3]\n", "cell task=ett,lookback=-3: --lookback must be a whole"),
        ("grid:\n  task: [bit-xor]\noptions:\n  lookback: 96\n", "task 'bit-xor' takes no option lookback"),
        ("runs: /proc/fpt-runs\ngrid:\n  task: [bit-xor]\n", "cannot create the spec's 'runs' folder /proc/fpt-runs"),
    ],
)
def test_hostile_specs_are_refused_in_one_line_before_anything_runs(tmp_path, capsys, text, words):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    assert main(["sweep", str(path), "--out", str(tmp_path / "sweep")]) == 2
    message = one_line_error(capsys)
    assert words in message and len(message) < 400 and not (tmp_path / "sweep").exists()


def test_a_directory_a_binary_file_or_a_huge_file_as_spec_is_refused(tmp_path, capsys):
    binary = tmp_path / "spec.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    huge = tmp_path / "huge.yaml"
    huge.write_text("# " + "x" * (2 << 20))
    for spec, words in ((tmp_path, "not a file"), (binary, "not text"), (huge, "a short YAML file")):
        assert main(["sweep", str(spec), "--out", str(tmp_path / "sweep")]) == 2
        assert words in one_line_error(capsys)


def test_reproduce_bounds_its_numbers(tmp_path, capsys):
    for argv, words in (
        (["--seeds", "1000000000"], "at most"),
        (["--parallel", "0"], "--parallel from 1"),
        (["--set", "steps=many"], "steps must be int"),
        (["--set", "nope"], "KEY=VALUE"),
        (["--set", "lr=-1"], "--lr must be a positive number"),
        (["--set", "dropout=2"], "--dropout must be in [0, 1)"),
        (["--budget", "50", "--set", "recipe=fast"], "--warmup-steps must be at least 0 and below"),
    ):
        assert main(["reproduce", "table1", "--out", str(tmp_path / "r"), *argv]) == 2
        assert words in one_line_error(capsys)
    assert not (tmp_path / "r").exists()


def test_numbers_written_as_text_become_numbers_where_the_option_takes_one(tmp_path):
    from fpt.experiments.reproduce import Reproduction
    from fpt.experiments.sweep_spec import load_spec

    path = tmp_path / "spec.yaml"
    path.write_text("grid:\n  task: [bit-xor]\n  lr: [1e-3, 3e-4]\noptions:\n  grad_clip: 1e0\n")
    spec = load_spec(path)  # YAML 1.1 reads 1e-3 as the text "1e-3"
    assert spec.grid["lr"] == [1e-3, 3e-4] and spec.options["grad_clip"] == 1.0
    plan = Reproduction(["table1"], options={"lr": "1e-3"})
    plan.check()
    assert plan.options["lr"] == 1e-3


def test_cell_keys_under_options_or_set_are_refused(tmp_path, capsys):
    path = tmp_path / "spec.yaml"
    path.write_text("grid:\n  seed: [0, 1]\noptions:\n  task: bit-xor\n")  # used to end in a KeyError
    assert main(["sweep", str(path), "--out", str(tmp_path / "s")]) == 2
    assert "list it under grid" in one_line_error(capsys)
    assert main(["reproduce", "table1", "--set", "variant=fpt", "--out", str(tmp_path / "r")]) == 2
    assert "the tables choose it" in one_line_error(capsys)


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")  # a zombie has ended; only its exit status waits to be read


def _endless_sweep(tiny_gpt2, tmp_path, grid: str, first: str, **popen) -> subprocess.Popen:
    """`fpt sweep` over Bit XOR cells of a million steps each (`grid`: its lines after the task's),
    in tmp_path/sweep, returned once its cell `first` (tmp_path/sweep/runs/FIRST) is training."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"grid:\n  task: [bit-xor]\n{grid}options:\n"
        f"  backbone: {tiny_gpt2}\n  n_bits: 4\n  eval_size: 8\n  batch_size: 4\n  steps: 1000000\n  eval_every: 5\n"
    )
    sweep = subprocess.Popen(
        [sys.executable, "-m", "fpt", "sweep", str(spec), "--out", str(tmp_path / "sweep"), "--no-progress"],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        **popen,
    )
    deadline = time.monotonic() + 120
    while not (tmp_path / "sweep" / "runs" / first / "checkpoint.safetensors").exists():  # the cell is training
        assert sweep.poll() is None and time.monotonic() < deadline, "the cell never started training"
        time.sleep(0.2)
    return sweep


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads children from /proc (Linux)")
@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "kill-9"])
def test_a_killed_sweep_leaves_no_cell_training(tiny_gpt2, tmp_path, signum):
    sweep = _endless_sweep(tiny_gpt2, tmp_path, "", "task=bit-xor", stderr=subprocess.DEVNULL)
    run = tmp_path / "sweep" / "runs" / "task=bit-xor"
    (cell,) = _children(sweep.pid)
    sweep.send_signal(signum)
    sweep.wait(30)
    deadline = time.monotonic() + 30
    while _alive(cell) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _alive(cell)
    if left:
        os.kill(cell, signal.SIGKILL)  # leave nothing behind, even failing
    assert not left, "the cell kept training after its sweep died"
    assert (run / "checkpoint.safetensors").exists() and not (run / "summary.json").exists()  # resumable


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM-to-the-sweep", "Ctrl-C-to-its-group"])
def test_a_signalled_sweep_pauses_its_cell_logs_the_sitting_and_begins_no_other(tiny_gpt2, tmp_path, signum):
    # its own session: the Ctrl-C of a terminal reaches its whole group
    popen = dict(stderr=subprocess.PIPE, text=True, start_new_session=True)
    sweep = _endless_sweep(tiny_gpt2, tmp_path, "  seed: [0, 1]\n", "task=bit-xor,seed=0", **popen)
    out = tmp_path / "sweep"
    first, second = out / "runs" / "task=bit-xor,seed=0", out / "runs" / "task=bit-xor,seed=1"
    if signum == signal.SIGTERM:
        sweep.send_signal(signum)  # to the sweep alone: it passes the request on
    else:
        os.killpg(sweep.pid, signum)
    try:
        stderr = sweep.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        os.killpg(sweep.pid, signal.SIGKILL)
        raise
    assert sweep.returncode == 128 + signum, stderr
    assert "run the same command again to continue" in stderr.strip().splitlines()[-1]
    (sitting,) = [json.loads(line) for line in (first / "sittings.jsonl").read_text().splitlines()]
    assert sitting["exit"] == 128 + signum and sitting["to_step"] > 0  # stopped with a checkpoint, not killed
    assert (first / "checkpoint.safetensors").exists() and not (first / "summary.json").exists()
    assert not second.exists()  # never begun
    with open(out / "results.csv") as handle:
        assert [row["status"] for row in csv.DictReader(handle)] == ["stopped", "stopped"]


# a cell that counts the SIGTERMs it gets, and ends on the third
COUNTING_CELL = """
import signal, sys, time
got = []
def note(signum, frame):
    got.append(signum)
    print(len(got), flush=True)
    if len(got) == 3:
        sys.exit(143)
signal.signal(signal.SIGTERM, note)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def test_a_sweep_passes_each_stop_request_on_once_and_begins_nothing_after_the_first(monkeypatch, capfd):
    import fpt.experiments.sweep_stop as sweep_stop

    monkeypatch.setattr(sweep_stop, "SAME_REQUEST_S", 0.3)
    before = [signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)]
    with sweep_stop.SweepStop() as stop:
        cell = stop.start([sys.executable, "-c", COUNTING_CELL], stdout=subprocess.PIPE, text=True)
        assert cell.stdout.readline() == "ready\n"
        os.kill(os.getpid(), signal.SIGTERM)  # the first request: passed on
        # within the moment: the same request (a Ctrl-C by another route); sent before waiting for the
        # cell, whose answer may take longer than the moment on a loaded machine
        os.kill(os.getpid(), signal.SIGINT)
        assert cell.stdout.readline() == "1\n" and stop.signum == signal.SIGTERM
        assert stop.start([sys.executable, "-c", "pass"]) is None  # nothing begins once asked to stop
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)  # later: asked again, passed on (a cell then stops at once)
        assert cell.stdout.readline() == "2\n"
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)
        assert cell.stdout.readline() == "3\n" and cell.wait(10) == 143
        stop.finished(cell)
    assert [signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)] == before  # given back
    err = capfd.readouterr().err
    assert "ask again to stop them at once" in err and err.count("again: stopping the running cells at once") == 2
    with pytest.raises(KeyboardInterrupt, match="run the same command again"):
        stop.raise_if_stopped(1)


# What a sweep's or reproduction's last step imports, loaded before its first run: code changed under
# a run of hours cannot break its end. A fresh interpreter, since this one has imported them all already.
LOADED_AT_START = """
import json, sys
import fpt.experiments.reproduce, fpt.experiments.sweep
from fpt.cli import main

last_step = ("fpt.experiments.controls", "fpt.experiments.plots", "fpt.experiments.published_tables")
last_step += ("fpt.experiments.shuffled", "fpt.experiments.ucr_tables")
assert not set(last_step) & set(sys.modules), "loaded before the command began"

def first_run(*args, **kwargs):
    print("missing at the first run:", sorted(set(last_step) - set(sys.modules)))
    raise SystemExit(0)

fpt.experiments.reproduce.run_reproduction = fpt.experiments.sweep.run_sweep = first_run
main(json.loads(sys.argv[1]))
"""


@pytest.mark.parametrize("command", ["reproduce", "sweep"])
def test_a_long_command_loads_what_its_last_step_imports_before_it_trains(tmp_path, command):
    spec = tmp_path / "spec.yaml"
    spec.write_text("grid:\n  task: [bit-xor]\noptions:\n  steps: 2\n")
    out = str(tmp_path / "out")
    argv = {
        "reproduce": ["reproduce", "controls", "--tasks", "bit-xor", "--out", out, "--no-progress"],
        "sweep": ["sweep", str(spec), "--out", out, "--no-progress"],
    }[command]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", LOADED_AT_START, json.dumps(argv)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "missing at the first run: []"
