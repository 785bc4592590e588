"""Small tables (issue 57 item 4): which training recipe the scikit-learn estimators should use on a few
hundred rows, chosen on validation across scikit-learn's small sets (load_diabetes, load_wine,
load_breast_cancer, load_iris), then the test split scored once, beside LogisticRegression / Ridge and
HistGradientBoosting on the same rows. One thread, as a user's laptop would give it:

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/small_data.py \\
        --out benchmarks/results/small_data

Protocol: each set is split once into training (80%) and test (20%, stratified for labels, seed 0).
Every candidate recipe is an FPTClassifier / FPTRegressor (the packaged MiniLM, frozen) behind a
StandardScaler, fitted on the training rows; the estimator holds out its own validation rows (20% of
them, seeded), scores fpt on them, and fits the baselines on the same remaining rows
(`reference_scores_`). The recipe is chosen on those validation scores alone: the largest mean of (fpt's
score - the best baseline's), accuracy and R² alike, over the sets. Only then is the test split scored,
once, for the chosen recipe and for the estimators' defaults before this benchmark; the baselines on test
are fitted on all the training rows (the scaler too), as a user would fit them. Writes OUT/SET.json per set
(every candidate's validation scores, the baselines', the seconds) and OUT/selection.json (the choice, the
test scores, the CPU). It refuses to run again over a finished OUT unless --force: the test split is scored once.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

from fpt.core.runtime import cpu_model

SETS = ("diabetes", "wine", "breast_cancer", "iris")
BATCH = 32
# The candidates: the estimators' defaults before this benchmark (500 steps, the fast recipe's 3e-3), and
# budgets in epochs of the rows trained on (steps from the data size), at two rates, and the paper's
# recipe (dropout 0.1, a constant 1e-3, batch 16)
CANDIDATES = {
    "default (500 steps)": {"steps": 500},
    "5 epochs": {"epochs": 5},
    "10 epochs": {"epochs": 10},
    "30 epochs, lr 1e-3": {"epochs": 30, "lr": 1e-3},
    "10 epochs, paper recipe": {"epochs": 10, "recipe": "paper", "batch_size": 16},
    "30 epochs, paper recipe": {"epochs": 30, "recipe": "paper", "batch_size": 16},
}
DEFAULT = "default (500 steps)"


def load(name: str):
    """(X, y, is_classification) of one of scikit-learn's bundled sets."""
    import sklearn.datasets as datasets

    X, y = getattr(datasets, f"load_{name}")(return_X_y=True)
    return X, y, name != "diabetes"


def split(name: str):
    from sklearn.model_selection import train_test_split

    X, y, classify = load(name)
    return (*train_test_split(X, y, test_size=0.2, random_state=0, stratify=y if classify else None), classify)


def estimator(options: dict, classify: bool, rows: int, threads: int):
    """The candidate's estimator behind a StandardScaler; a budget in epochs becomes steps over the rows the
    estimator trains on (its validation rows held out)."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from fpt import FPTClassifier, FPTRegressor

    options = dict(options)
    batch = options.get("batch_size", BATCH)
    if "epochs" in options:
        trained = rows - int(rows * 0.2)
        options["steps"] = options.pop("epochs") * math.ceil(trained / batch)
    kind = FPTClassifier if classify else FPTRegressor
    return make_pipeline(StandardScaler(), kind(backbone="minilm", threads=threads, seed=0, **options))


def fit_set(name: str, threads: int) -> tuple[dict, dict]:
    """({candidate: its validation record}, {candidate: the fitted pipeline}) on one set."""
    X_train, _, y_train, _, classify = split(name)
    records, fitted = {}, {}
    for candidate, options in CANDIDATES.items():
        started = time.perf_counter()
        pipeline = estimator(options, classify, len(X_train), threads).fit(X_train, y_train)
        model = pipeline[-1]
        records[candidate] = {
            "options": options,
            "steps": model.steps,
            "fpt": model.validation_score_,
            "baselines": model.reference_scores_,
            "comparison": model.reference_comparison_,
            "seconds": round(time.perf_counter() - started, 1),
        }
        fitted[candidate] = pipeline
        print(
            f"{name} / {candidate}: {model.reference_comparison_} ({records[candidate]['seconds']:.0f} s)", flush=True
        )
    return records, fitted


def gap(record: dict) -> float:
    """fpt's validation score less the best baseline's (the training mean and the majority label included)."""
    return record["fpt"] - max(record["baselines"].values())


def choose(per_set: dict[str, dict]) -> tuple[str, dict[str, float]]:
    """The candidate of the largest mean gap over the sets, on validation alone; and every candidate's mean gap."""
    means = {c: statistics.mean(gap(per_set[s]["candidates"][c]) for s in per_set) for c in CANDIDATES}
    return max(means, key=means.get), means


def test_scores(name: str, pipelines: dict) -> dict:
    """The test split, scored once: the given fpt pipelines, and the baselines fitted on all the training rows."""
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X_train, X_test, y_train, y_test, classify = split(name)
    linear = LogisticRegression(max_iter=500) if classify else Ridge()
    trees = (HistGradientBoostingClassifier if classify else HistGradientBoostingRegressor)(random_state=0)
    scores = {f"fpt, {candidate}": float(p.score(X_test, y_test)) for candidate, p in pipelines.items()}
    scores[type(linear).__name__] = float(
        make_pipeline(StandardScaler(), linear).fit(X_train, y_train).score(X_test, y_test)
    )
    scores[type(trees).__name__] = float(trees.fit(X_train, y_train).score(X_test, y_test))
    return {"metric": "accuracy" if classify else "r2", "rows": [len(X_train), len(X_test)], "scores": scores}


def write(path: Path, record: dict) -> None:
    from fpt.core.paths import atomic_write

    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--force", action="store_true", help="run again over a finished OUT")
    args = parser.parse_args()
    sets = args.sets.split(",")
    if not args.force and (args.out / "selection.json").exists():
        raise SystemExit(f"{args.out} holds a finished run: --force runs it again (the test is scored once)")
    per_set, fitted = {}, {}
    for name in sets:
        records, fitted[name] = fit_set(name, args.threads)
        per_set[name] = {"set": name, "cpu": cpu_model(), "threads": args.threads, "candidates": records}
        write(args.out / f"{name}.json", per_set[name])
    chosen, means = choose(per_set)
    print(f"chosen on validation: {chosen} (mean gap to the best baseline {means[chosen]:+.3f})", flush=True)
    tests = {name: test_scores(name, {c: fitted[name][c] for c in dict.fromkeys([chosen, DEFAULT])}) for name in sets}
    for name, scored in tests.items():
        print(f"{name} test ({scored['metric']}): " + ", ".join(f"{k} {v:.3f}" for k, v in scored["scores"].items()))
    selection = {"chosen": chosen, "mean_gap": means, "default": DEFAULT, "test": tests, "cpu": cpu_model()}
    write(args.out / "selection.json", {**selection, "threads": args.threads, "sets": sets})


if __name__ == "__main__":
    main()
