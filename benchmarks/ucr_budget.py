"""How long `fpt train` should train by default on a small set of series (issue 57 item 3): the former
fixed 2,000 steps against budgets in epochs (passes over the training series), chosen on validation
across UCR/UEA sets sktime bundles. Beside benchmarks/small_data.py, which chose ten epochs for the
scikit-learn estimators on tabular sets.

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ucr_budget.py --out benchmarks/results/ucr_budget

Protocol: `fpt train`'s own defaults (the paper recipe: batch 16, a constant 1e-3, dropout 0.1; the packaged
MiniLM, frozen; seed 0), each set's official training split with a fifth of its series held out as
validation (--val-size, a fixed draw), every candidate's last evaluation of that validation split read.
The budget is chosen on validation alone: the highest mean accuracy over the sets. Each run also scores
the official test split once at its end (as every run does); OUT/selection.json reports the test split only
for the chosen budget and the former default, after the choice. Writes OUT/SET/CANDIDATE (each run's files)
and OUT/selection.json.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from fpt.core.runtime import cpu_model

# sktime's bundled sets, small to mid-sized training splits; JapaneseVowels raw, as the controls train it
SETS = {
    "ArrowHead": {},
    "GunPoint": {},
    "ItalyPowerDemand": {},
    "BasicMotions": {},
    "JapaneseVowels": {"znorm": False},
}
CANDIDATES = {
    "2000 steps (former default)": {"steps": 2000},
    "10 epochs": {"epochs": 10},
    "30 epochs": {"epochs": 30},
    "100 epochs": {"epochs": 100},
    "10 epochs, at least 200 steps": {"epochs": 10, "min_steps": 200},
}
DEFAULT = "2000 steps (former default)"


def run(out: Path, dataset: str, candidate: str, threads: int) -> dict:
    """A finished run's summary: trained here unless OUT already holds it."""
    import fpt
    from fpt.training.build import build_task

    path = out / dataset / candidate.split(" (")[0].replace(",", "").replace(" ", "-")
    if (path / "summary.json").is_file():
        return json.loads((path / "summary.json").read_text())
    options = {"dataset": dataset, **SETS[dataset]}
    train_size = build_task(fpt.TrainConfig(task="ucr", task_options=options)).notes["train_size"]
    options["val_size"] = max(1, train_size // 5)
    budget = dict(CANDIDATES[candidate])
    floor = budget.pop("min_steps", None)
    if floor is not None:  # the passes' steps, raised to the floor
        trained, batch = train_size - options["val_size"], fpt.TrainConfig.from_recipe("paper").batch_size
        budget = {"steps": max(floor, math.ceil(budget.pop("epochs") * trained / batch))}
    config = fpt.TrainConfig.from_recipe(
        "paper",
        task="ucr",
        backbone="minilm",
        seed=0,
        threads=threads,
        baselines=False,
        task_options=options,
        **budget,
    )
    summary, _ = fpt.train(config, out=path, progress=False)
    print(f"{dataset} {candidate}: val accuracy {summary['final']['accuracy']:.4f}", flush=True)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/ucr_budget"))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    val, test, steps, seconds = {}, {}, {}, {}
    for dataset in SETS:
        for candidate in CANDIDATES:
            summary = run(args.out, dataset, candidate, args.threads)
            val.setdefault(candidate, {})[dataset] = summary["final"]["accuracy"]
            test.setdefault(candidate, {})[dataset] = summary["test"]["test"]["accuracy"]
            steps.setdefault(candidate, {})[dataset] = summary["step"]
            seconds.setdefault(candidate, {})[dataset] = summary["wall_time_s"]
    means = {candidate: statistics.mean(scores.values()) for candidate, scores in val.items()}
    chosen = max(means, key=means.get)
    record = {
        "cpu": cpu_model(),
        "threads": args.threads,
        "validation": val,
        "validation_mean": means,
        "steps": steps,
        "seconds": seconds,
        "chosen": chosen,
        # read only now, after the choice: the chosen budget's and the former default's
        "test": {candidate: test[candidate] for candidate in dict.fromkeys([chosen, DEFAULT])},
    }
    (args.out / "selection.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"chosen on validation: {chosen} (mean validation accuracy {means[chosen]:.4f})")


if __name__ == "__main__":
    main()
