"""README.md's "A five-minute tour", run exactly as written, timed command by command (issue 57: the
tour must run as written in five minutes on two cores).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/tour.py --out tour_xeon_amx.json

The tour's bash block is read from README.md by `tour_commands` (tests/test_readme_tour.py reads it
the same way) and each command runs through `bash -c`, in order, in a fresh temporary folder, with this
interpreter's folder first on PATH: `fpt` and `python` are the ones a reader gets after `source
.venv/bin/activate`, and the backbone is the packaged MiniLM the tour names. A command that fails
stops the benchmark (the times before it would not be the tour's). The threads are left as the
environment sets them: a reader's command uses every core.

Writes benchmarks/results/tour/NAME.json (--out; default tour.json): each command's wall time and
its last lines of output, the time of each numbered step and of the whole tour, with the CPU model,
the usable cores, OMP_NUM_THREADS, torch's version and the load average before and after (a shared
machine's times are not the tour's own; `--note` says so in the record).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
RESULTS = Path(__file__).parent / "results" / "tour"
HEADING = "## A five-minute tour"
TARGET_S = 300  # the tour's name: five minutes, on two cores
TAIL_LINES = 4  # of each command's output, kept in the record (the scores it printed)


@dataclass(frozen=True)
class Command:
    """One command of the tour: its numbered step ("1", "2", ...) and its text as written (a line
    continued with a backslash joined into one; a trailing comment kept, as bash ignores it)."""

    step: str
    text: str


def tour_block(readme: str) -> str:
    """The bash block under the tour's heading."""
    if HEADING not in readme:
        raise ValueError(f"README.md has no heading {HEADING!r}")
    after = readme[readme.index(HEADING) :]
    found = re.search(r"```bash\n(.*?)```", after, re.S)
    if found is None:
        raise ValueError(f"no ```bash block after {HEADING!r}")
    return found.group(1)


def tour_commands(readme: str) -> list[Command]:
    """The tour's commands in order, each under the number of the `# N.` comment above it."""
    commands, step, pending = [], None, ""
    for line in tour_block(readme).splitlines():
        if not pending and line.lstrip().startswith("#"):
            numbered = re.match(r"#\s*(\d+)\.", line.strip())
            step = numbered.group(1) if numbered else step
            continue
        pending += line.strip() if pending else line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip() + " "
            continue
        if pending.strip():
            if step is None:
                raise ValueError(f"the tour's command {pending.strip()!r} comes before its first `# 1.` comment")
            commands.append(Command(step, pending.strip()))
        pending = ""
    return commands


def run_tour(commands: list[Command], folder: Path) -> list[dict]:
    """Each command through bash in `folder`, timed; the first failure stops the benchmark."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    rows = []
    for number, command in enumerate(commands, 1):
        started = time.perf_counter()
        done = subprocess.run(["bash", "-c", command.text], cwd=folder, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{command.text} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
        tail = (done.stdout + done.stderr).strip().splitlines()[-TAIL_LINES:]
        rows.append({"step": command.step, "command": command.text, "seconds": round(seconds, 2), "tail": tail})
        print(f"{number}/{len(commands)} (step {command.step}) {seconds:.1f} s: {command.text[:90]}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="tour.json", help="file name under benchmarks/results/tour/")
    parser.add_argument("--note", default="", help="what else ran on the machine meanwhile, kept in the record")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))  # fpt's own helpers, as from a clone without an install
    from fpt.core.paths import write_json
    from fpt.core.runtime import cpu_model, usable_cores

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    commands = tour_commands(README.read_text())
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        rows = run_tour(commands, Path(folder))
    steps: dict[str, float] = {}
    for row in rows:
        steps[row["step"]] = round(steps.get(row["step"], 0.0) + row["seconds"], 2)
    total = round(sum(row["seconds"] for row in rows), 2)
    record = {
        "cpu_model": cpu_model(),
        "usable_cores": usable_cores(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "python": sys.version.split()[0],
        "torch": version("torch"),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "note": args.note,
        "commands": rows,
        "step_s": steps,
        "total_s": total,
        "target_s": TARGET_S,
        "within_target": total <= TARGET_S,
    }
    path = write_json(RESULTS / args.out, record)
    print(json.dumps(steps, indent=2))
    print(f"the tour: {total:.1f} s (target {TARGET_S} s); written {path}")


if __name__ == "__main__":
    main()
