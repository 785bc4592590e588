"""The frozen MiniLM on M3 (issue 60): each subset's budget chosen on validation (the horizon before
each series' test), then three seeds scored on the competition's test split, beside statsforecast's
baselines on the same split (benchmarks/m3_baselines.py writes those).

    python benchmarks/m3_fpt.py --out benchmarks/results/m3       # search, then the seeds; resumable
    python benchmarks/m3_fpt.py --arms random,none,attention,block  # the controls at fpt's chosen budget
    python benchmarks/m3_fpt.py --arms random,none,attention,block --arm-seeds 0,1,2  # and on fpt's seeds
    python benchmarks/m3_fpt.py --full-lrs 1e-4,3e-4 --arm-seeds 0,1,2  # every weight trained, own rate

Each run is a run directory under OUT/SUBSET/ (config.json, metrics.jsonl, summary.json: what the
tables read); a finished one is not trained again. Protocol: the fast recipe, precision auto, every
choice made on validation sMAPE (seed 0), the test split scored once at the end of each run and read
only for the final table. One process at a time, all cores to it (timings are comparable in one run).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

SUBSETS = ("yearly", "quarterly", "monthly", "other")
BUDGETS = (1000, 3000)  # steps tried on validation, seed 0
SEEDS = (0, 1, 2)
# the controls (fpt.backbones.control_bodies, --init random): each replaces or re-initialises the
# frozen pretrained blocks and keeps everything else of fpt's run (recipe, budget, seed)
ARMS = {
    "random": {"init": "random"},
    "none": {"body": "none"},
    "attention": {"body": "attention"},
    "block": {"body": "block"},
    # every weight trained from a random init (Lu et al.'s Full). It learns little at the rate that suits a
    # frozen body (fpt.experiments.rate_search), so it takes its own rate, chosen on validation (--full-lrs)
    "full": {"policy": "full", "init": "random"},
}


def run(out: Path, subset: str, steps: int, seed: int, threads: int, arm: str = "fpt", lr: float | None = None) -> dict:
    """A finished run's summary: trained here unless OUT already holds it (lr: the arm's own rate)."""
    import fpt

    label = arm if lr is None else f"{arm}-lr{lr:g}"
    name = f"fast{steps}-seed{seed}" if arm == "fpt" else f"fast{steps}-{label}-seed{seed}"
    path = out / subset / name
    if (path / "summary.json").is_file():
        return json.loads((path / "summary.json").read_text())
    config = fpt.TrainConfig.from_recipe(
        "fast",
        task=f"m3:{subset}",
        backbone="minilm",
        steps=steps,
        warmup_steps=min(100, steps // 10),
        eval_every=max(100, steps // 5),
        seed=seed,
        threads=threads,
        baselines=False,  # scored once for all seeds by benchmarks/m3_baselines.py, on the same split
        **ARMS.get(arm, {}),
        **({} if lr is None else {"lr": lr}),
    )
    started = time.perf_counter()
    summary, _ = fpt.train(config, out=path, progress=False)
    seconds = time.perf_counter() - started
    print(
        f"m3:{subset} {label} {steps} steps seed {seed}: val sMAPE {summary['final']['smape']:.2f} ({seconds:.0f} s)",
        flush=True,
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/m3"))
    parser.add_argument("--subsets", default=",".join(SUBSETS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--search-only", action="store_true", help="stop after the budgets' seed-0 runs")
    parser.add_argument("--arms", help="train these controls (random,none,attention,block) at fpt's budget")
    parser.add_argument("--arm-seeds", default="0", help="the controls' seeds, a comma list (default: 0)")
    parser.add_argument("--full-lrs", help="train the full arm: its rate chosen among these on seed 0's validation")
    args = parser.parse_args()
    chosen = {}
    for subset in args.subsets.split(","):
        val = {steps: run(args.out, subset, steps, 0, args.threads)["final"]["smape"] for steps in BUDGETS}
        chosen[subset] = {"steps": min(val, key=val.get), "val_smape": val}
        print(f"m3:{subset}: {chosen[subset]['steps']} steps chosen on validation ({val})", flush=True)
    if args.search_only:
        return
    if args.full_lrs:
        rates = [float(r) for r in args.full_lrs.split(",")]
        for subset, choice in chosen.items():
            val = {lr: run(args.out, subset, choice["steps"], 0, args.threads, "full", lr) for lr in rates}
            val = {lr: summary["final"]["smape"] for lr, summary in val.items()}
            lr = min(val, key=val.get)
            print(f"m3:{subset} full: rate {lr:g} chosen on validation ({val})", flush=True)
            for seed in (int(k) for k in args.arm_seeds.split(",")):
                run(args.out, subset, choice["steps"], seed, args.threads, "full", lr)
        return
    if args.arms:
        for subset, choice in chosen.items():
            for seed in (int(k) for k in args.arm_seeds.split(",")):
                for arm in args.arms.split(","):
                    run(args.out, subset, choice["steps"], seed, args.threads, arm)
        return
    results = {}
    for subset, choice in chosen.items():
        summaries = [run(args.out, subset, choice["steps"], seed, args.threads) for seed in SEEDS]
        results[subset] = {
            **choice,
            "test": [{k: s["test"]["test"][k] for k in ("smape", "mase", "owa", "series")} for s in summaries],
            "seconds": [s["wall_time_s"] for s in summaries],
        }
    record = {"machine": platform.processor() or platform.machine(), "threads": args.threads, "subsets": results}
    (args.out / "results.json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
