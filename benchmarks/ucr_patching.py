"""What patching a series buys the ucr task (issue 59): the same frozen MiniLM run on GunPoint at
several `--patch-size`s (time steps per token), its ms per step and its test accuracy, beside
MiniRocket's on the same split (each run's own baselines). One process at a time, all cores to it.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/ucr_patching.py --out benchmarks/results/ucr_patching

Protocol: the fast recipe, a fixed budget (--steps), 10 of the 50 training series held out as
validation (watched, nothing chosen on it), the test split scored once at the end of each run.
Each run is a run directory OUT/patchP (config.json, metrics.jsonl, summary.json); a finished one is
not trained again.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def run(out: Path, dataset: str, patch: int, steps: int) -> dict:
    """A finished run's summary: trained here unless OUT already holds it."""
    import fpt

    path = out / f"patch{patch}"
    if (path / "summary.json").is_file():
        return json.loads((path / "summary.json").read_text())
    config = fpt.TrainConfig.from_recipe(
        "fast",
        task=f"ucr:{dataset}",
        task_options={"patch_size": patch, "val_size": 10},
        backbone="minilm",
        steps=steps,
        eval_every=steps,
        warmup_steps=min(100, steps // 10),
    )
    summary, _ = fpt.train(config, out=path, progress=False)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="GunPoint")
    parser.add_argument("--patches", default="1,3,10", help="time steps per token (GunPoint: 150 steps)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    for patch in map(int, args.patches.split(",")):
        summary = run(args.out, args.dataset, patch, args.steps)
        baselines = {name: s["accuracy"] for name, s in (summary.get("baselines") or {}).get("scores", {}).items()}
        print(
            f"{args.dataset} patch {patch}: {summary['task_notes']['tokens']} tokens, "
            f"{summary['ms_per_step']:.0f} ms/step, test {summary['test']['test']['accuracy']:.3f} "
            f"(MiniRocket {baselines.get('MiniRocket', float('nan')):.3f}), {summary['wall_time_s']:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
