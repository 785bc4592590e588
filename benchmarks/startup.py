"""How long the `fpt` command takes to answer, against a bare `python -c "import torch"` on the same
machine in the same sitting (issue 59): `fpt --help`, `fpt train --help`, `fpt backbones`, `fpt info`
and, for `fpt train`, the time from launching the process to the end of its first training step.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/startup.py --repeats 7 --out startup_zen4.json   # idle machine

Each repeat runs every command once, one after another in a fresh process (so a slow spell of the
machine hits them all); the record keeps every time and the medians. The commands run as
`python -m fpt ...` with this interpreter (the `fpt` script's own entry point). The threads are left
as the environment sets them: a user's command uses every core.

Time to the first step: `fpt train --task bit-xor --backbone minilm --steps 1` in a temporary run
directory. Its one metrics.jsonl line is appended right after the step-1 evaluation, and says how long
training had run by then (`elapsed_s`: the step and the evaluation) and how long the step took
(`ms_per_step`); the line's arrival is watched (every 5 ms), so training began at its arrival less
`elapsed_s`, and the first step ended `ms_per_step` later. What comes before (imports, the task,
the backbone from disk, the peak FLOP/s measure) is start-up; the evaluation, the test split and
the checkpoint after it are not counted.

Writes benchmarks/results/startup/NAME.json (--out; default startup.json) with the CPU model, the
usable cores, torch's and transformers' versions and the load average before and after (a busy
machine's times are not the command's): the targets are `fpt --help` under a quarter of
`import torch`, and `fpt info` under 3 s on two idle cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from fpt.core.paths import write_json
from fpt.core.runtime import cpu_model, usable_cores

RESULTS = Path(__file__).parent / "results" / "startup"
FPT = [sys.executable, "-m", "fpt"]
COMMANDS = {  # name: argv, each timed from launch to exit
    "import_torch": [sys.executable, "-c", "import torch"],
    "fpt_help": [*FPT, "--help"],
    "fpt_train_help": [*FPT, "train", "--help"],
    "fpt_backbones": [*FPT, "backbones"],
    "fpt_info": [*FPT, "info", "--backbone", "minilm", "--task", "bit-xor"],
}
TRAIN = [*FPT, "train", "--task", "bit-xor", "--backbone", "minilm", "--steps", "1", "--no-progress", "--no-baselines"]
POLL_S = 0.005
TARGETS = {"fpt_help_over_import_torch": 0.25, "fpt_info_s": 3.0}


def time_command(argv: list[str]) -> float:
    """Seconds from launch to exit; a command that fails stops the benchmark (its time would mean nothing)."""
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return seconds


def time_to_first_step() -> dict:
    """Launch `fpt train --steps 1` and watch its metrics.jsonl: seconds from launch to the start of
    training and to the end of the first step (see the module's docstring)."""
    with tempfile.TemporaryDirectory() as folder:
        metrics = Path(folder) / "run" / "metrics.jsonl"
        started = time.perf_counter()
        process = subprocess.Popen(
            [*TRAIN, "--out", str(metrics.parent)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        arrived = line = None
        while process.poll() is None and line is None:
            text = metrics.read_text() if metrics.exists() else ""
            if text.endswith("\n"):  # the whole line, not half of one being written
                arrived, line = time.perf_counter(), json.loads(text.splitlines()[0])
            else:
                time.sleep(POLL_S)
        err = process.communicate()[1]
        if process.returncode != 0 or line is None:
            raise SystemExit(f"{' '.join(TRAIN)} exited {process.returncode}: {err.decode()[-2000:]}")
    training_began = arrived - line["elapsed_s"] - started
    return {"to_training_s": training_began, "to_first_step_end_s": training_began + line["ms_per_step"] / 1000}


def measure(repeats: int) -> dict[str, list[float]]:
    """Every command `repeats` times, interleaved: each repeat runs them all once."""
    times: dict[str, list[float]] = {name: [] for name in [*COMMANDS, "train_to_training_s", "train_to_first_step_s"]}
    for repeat in range(repeats):
        for name, argv in COMMANDS.items():
            times[name].append(round(time_command(argv), 3))
        first = time_to_first_step()
        times["train_to_training_s"].append(round(first["to_training_s"], 3))
        times["train_to_first_step_s"].append(round(first["to_first_step_end_s"], 3))
        said = ", ".join(f"{name} {values[-1]:.2f} s" for name, values in times.items())
        print(f"repeat {repeat + 1}/{repeats}: {said}", flush=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each command; medians reported (default 5)")
    parser.add_argument("--out", default="startup.json", help="file name under benchmarks/results/startup/")
    parser.add_argument("--note", help="what the record should say of the sitting, e.g. a machine shared with others")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    load_before = os.getloadavg()
    times = measure(args.repeats)
    medians = {name: round(statistics.median(values), 3) for name, values in times.items()}
    ratio = medians["fpt_help"] / medians["import_torch"]
    # on a busy machine the seconds are the machine's; a ratio to import torch, timed beside it, less so
    info_ratio = medians["fpt_info"] / medians["import_torch"]
    record = {
        "cpu_model": cpu_model(),
        "usable_cores": usable_cores(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "python": sys.version.split()[0],
        "torch": version("torch"),
        "transformers": version("transformers"),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        **({"note": args.note} if args.note else {}),
        "repeats": args.repeats,
        "commands": {name: " ".join(argv[1:]) for name, argv in COMMANDS.items()}
        | {"train_to_first_step_s": " ".join(TRAIN[1:]) + " --out TEMP"},
        "seconds": times,
        "median_s": medians,
        "fpt_help_over_import_torch": round(ratio, 3),
        "fpt_info_over_import_torch": round(info_ratio, 3),
        "targets": TARGETS,
        "targets_met": {
            "fpt_help_over_import_torch": ratio < TARGETS["fpt_help_over_import_torch"],
            "fpt_info_s": medians["fpt_info"] < TARGETS["fpt_info_s"],
        },
    }
    path = write_json(RESULTS / args.out, record)
    print(json.dumps(record["median_s"], indent=2))
    print(f"fpt --help / import torch: {ratio:.3f}; fpt info / import torch: {info_ratio:.3f}; written {path}")


if __name__ == "__main__":
    main()
