"""Does `--compile` pay on this CPU? fpt's own training step with and without torch.compile (the
inductor CPU backend) on one task of each family, measured in one run on this machine (issue 34).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/compile_speed.py            # about 15 min on 2 idle cores
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/compile_speed.py --only bits images --steps 10

Each (family, setting, repeat) runs in its own process, eager and compiled interleaved, each
with an empty inductor cache (a second run would otherwise load the first one's graphs). Per run:
the first step alone (where torch.compile compiles), then `--steps` more, whose median is the
step time. Compiling pays back after (its first step's extra time) / (the time it saves a step)
steps. A family whose data this machine lacks gets a row with fpt's error, which names the command
that fetches it. ListOps is left out: its lengths vary from batch to batch, and compile recompiles.

Writes benchmarks/results/compile/compile_speed.json and prints a Markdown table.
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
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

RESULTS = Path(__file__).parent / "results" / "compile" / "compile_speed.json"

# family: the TrainConfig fields of its task (the packaged MiniLM, the fast recipe, fp32)
FAMILIES = {
    "bits": dict(task="bit-memory"),
    "images": dict(task="mnist"),
    "forecast": dict(task="ett:ETTh1", task_options={"horizon": 96}),
    "series": dict(task="ucr", task_options={"dataset": "JapaneseVowels"}),
}


def worker(family: str, compiled: bool, steps: int, seed: int) -> dict:
    """One run in this process: build, the first step, `steps` more; times and losses."""
    import torch

    from fpt.training.build import build
    from fpt.training.config import TrainConfig
    from fpt.training.loop import Trainer

    fields = dict(backbone="minilm", precision="fp32", compile=compiled, seed=seed, **FAMILIES[family])
    config = TrainConfig.from_recipe("fast", **fields)  # the recipe of the headline runs
    started = time.perf_counter()
    task, model = build(config)
    trainer = Trainer(model, task, config, progress=False)
    build_s = time.perf_counter() - started
    times, losses = [], []
    for step in range(steps + 1):
        batch = task.train_batch(step, config.batch_size, seed)
        t = time.perf_counter()
        losses.append(trainer.train_step(batch)[0])
        times.append(time.perf_counter() - t)
    return {
        "family": family,
        "task": config.task,
        "compile": compiled,
        "batch": config.batch_size,
        "tokens": task.spec.seq_len,
        "threads": torch.get_num_threads(),
        "build_s": build_s,
        "first_step_s": times[0],
        "step_s_median": statistics.median(times[1:]),
        "step_s": times,
        "losses": losses,
    }


def run_one(family: str, compiled: bool, steps: int, seed: int) -> dict:
    """`worker` in a process of its own; a row with "error" (its last line) where it failed."""
    command = [sys.executable, __file__, "--worker", family, str(int(compiled)), str(steps), str(seed)]
    with tempfile.TemporaryDirectory(prefix="fpt-inductor-") as cache:  # cold: inductor keeps compiled graphs on disk
        environment = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        done = subprocess.run(command, capture_output=True, text=True, env=environment)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["exit status " + str(done.returncode)])[-1]
        return {"family": family, "compile": compiled, "error": tail}
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarise(rows: list[dict]) -> list[dict]:
    """Per family: the medians over repeats of each setting, their ratio, the break-even step."""
    summary = []
    for family in dict.fromkeys(r["family"] for r in rows):
        runs = {c: [r for r in rows if r["family"] == family and r["compile"] is c] for c in (False, True)}
        if any("error" in r for r in runs[False] + runs[True]) or not (runs[False] and runs[True]):
            errors = [r.get("error") for r in runs[False] + runs[True] if "error" in r]
            summary.append({"family": family, "error": errors[0] if errors else "a setting did not run"})
            continue
        eager, comp = (statistics.median(r["step_s_median"] for r in runs[c]) for c in (False, True))
        first = {c: statistics.median(r["first_step_s"] for r in runs[c]) for c in (False, True)}
        saving = eager - comp  # per step, once compiled
        extra = first[True] - first[False]  # what compiling costs, once
        losses = max(abs(a - b) for a, b in zip(runs[False][0]["losses"], runs[True][0]["losses"]))
        # repeat i ran its two settings back to back: their ratio is the speed-up that repeat measured
        pairs = [e["step_s_median"] / c["step_s_median"] for e, c in zip(runs[False], runs[True])]
        summary.append(
            {
                "family": family,
                "task": runs[False][0]["task"],
                "shape": f"{runs[False][0]['batch']} x {runs[False][0]['tokens']} tokens",
                "eager_step_s": eager,
                "compiled_step_s": comp,
                "speedup": eager / comp,
                "speedup_each_repeat": pairs,
                # the rule for a default: a 10% win, here in every repeat, not only in their median
                "wins": min(pairs) >= 1.10,
                "compile_s": extra,
                "break_even_steps": round(extra / saving) if saving > 0 else None,
                "largest_loss_difference": losses,
            }
        )
    return summary


def table(summary: list[dict]) -> str:
    """The summary as Markdown."""
    lines = [
        "| family | task | batch | eager step (median) | compiled step (median) | speed-up (each repeat) | "
        "compiling took | pays back after | largest loss difference | 10% faster in every repeat |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        if "error" in s:
            lines.append(f"| {s['family']} | error: {s['error'][:100]} | | | | | | | | |")
            continue
        pays = f"{s['break_even_steps']:,} steps" if s["break_even_steps"] is not None else "never"
        each = ", ".join(f"{x:.2f}" for x in s["speedup_each_repeat"])
        lines.append(
            f"| {s['family']} | {s['task']} | {s['shape']} | {1000 * s['eager_step_s']:.0f} ms | "
            f"{1000 * s['compiled_step_s']:.0f} ms | {s['speedup']:.2f}x ({each}) | {s['compile_s']:.0f} s | {pays} | "
            f"{s['largest_loss_difference']:.1e} | {'yes' if s['wins'] else 'no'} |"
        )
    return "\n".join(lines)


def main() -> None:
    """Run every asked family, eager and compiled interleaved, `--repeats` times; write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(FAMILIES), help="families to run (default: all)")
    parser.add_argument("--steps", type=int, default=20, help="steps after the first (the median is over these)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each setting, interleaved")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--table", action="store_true", help="summarise the saved rows again; run nothing")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.table:
        saved = json.loads(RESULTS.read_text())
        saved["summary"] = summarise(saved["rows"])
        RESULTS.write_text(json.dumps(saved, indent=1))
        print(table(saved["summary"]))
        return
    if args.worker:
        family, compiled, steps, seed = args.worker
        print(json.dumps(worker(family, compiled == "1", int(steps), int(seed))), flush=True)
        return
    import torch

    from fpt.core.runtime import bf16_note, cpu_model

    rows = []
    for family in args.only or list(FAMILIES):
        for repeat in range(args.repeats):
            for compiled in (False, True) if repeat % 2 == 0 else (True, False):
                rows.append(run_one(family, compiled, args.steps, args.seed))
                shown = {k: v for k, v in rows[-1].items() if k not in ("step_s", "losses")}
                print(json.dumps(shown), flush=True)
    summary = summarise(rows)
    print("\n" + table(summary))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    machine = {
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "bf16": bf16_note(),
    }
    command = " ".join([Path(sys.executable).name, *sys.argv])
    RESULTS.write_text(json.dumps({"machine": machine, "command": command, "summary": summary, "rows": rows}, indent=1))
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
