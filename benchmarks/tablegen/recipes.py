"""The fast recipe against the paper's, and how it was chosen on validation splits: the `recipes`,
`recipe-search`, `lr-probe` and `dropout-probe` tables of benchmarks/recipes.md."""

from __future__ import annotations

import csv

from fpt.training.run_dir import is_subset, whole_split

from .common import RESULTS, _json, _jsonl, _markdown, _pct, _rate

# --- the two recipes to the same accuracy ------------------------------------------------------------

# (task, init, the paper-recipe run, the fast-recipe run): each compared at the lower of the two runs'
# best whole-split evaluations, the accuracy both reached.
RECIPES = [
    ("MNIST", "pretrained", "mnist-fpt-paper-seed0", "mnist-fpt-fast-seed0"),
    ("MNIST", "pretrained", "mnist-fpt-paper-seed0", "mnist-fpt-fast4k-seed0"),
    ("MNIST", "pretrained", "mnist-fpt-paper-seed0", "mnist-fpt-fast16k-dropout0-seed0"),
    ("MNIST", "random", "mnist-random-paper-seed0", "mnist-random-fast-seed0"),
    ("MNIST", "random", "mnist-random-paper-seed0", "mnist-random-fast16k-dropout0-seed0"),
    ("Bit Memory", "pretrained", "bit-memory-fpt-paper-seed0", "bit-memory-fpt-fast-dropout0-eval100-seed0"),
    ("Bit Memory", "pretrained", "bit-memory-fpt-paper-seed0", "bit-memory-fpt-fast-eval100-seed0"),
    ("Bit Memory", "pretrained", "bit-memory-fpt-paper-seed0", "bit-memory-fpt-fast-seed0"),
]


def _step_time_ms(config: dict) -> float:
    """The idle-machine median step time benchmarks/recipe_speed.py measured for a run's recipe and dropout."""
    timing = _json(RESULTS / "recipe_speed.json")[config["task"]]
    recipe = config.get("recipe") or "paper"
    return next(
        r["ms_per_step"]
        for r in timing["rows"]
        if r["recipe"] == recipe and r["dropout"] == config["dropout"] and r["threads"] == 1
    )


def recipes_table() -> str:
    lines = []
    for task, init, paper_run, fast_run in RECIPES:
        runs = {}
        for name in (paper_run, fast_run):
            folder = RESULTS / "converge" / name
            records = _jsonl(folder / "metrics.jsonl")
            whole = [r for r in whole_split(records) if r["split"] == _json(folder / "summary.json")["final"]["split"]]
            runs[name] = (_json(folder / "config.json"), records, whole)
        target = min(max(r["accuracy"] for r in runs[name][2]) for name in (paper_run, fast_run))
        first = {name: next(r for r in runs[name][2] if r["accuracy"] >= target) for name in runs}
        config, records, whole = runs[fast_run]
        subsets = any(is_subset(r) for r in records if r["step"] < first[fast_run]["step"])
        notes = [
            f"dropout {config['dropout']:g}",
            "its only whole-split evaluation" if len(whole) == 1 else f"scored every {config['eval_every']:,} steps",
        ]
        minutes = {name: first[name]["step"] * _step_time_ms(runs[name][0]) / 60000 for name in runs}
        lines.append(
            [
                task,
                init,
                _pct(target),
                f"{first[paper_run]['step']:,}",
                f"{first[fast_run]['step']:,} ({'; '.join(notes)})",
                f"{minutes[paper_run]:.0f} / {minutes[fast_run]:.0f} min",
                ("≥ " if subsets else "") + f"{minutes[paper_run] / minutes[fast_run]:.1f}x",
            ]
        )
    return _markdown(
        [
            "task",
            "init",
            "accuracy both reached",
            "paper recipe: first at step",
            "fast recipe: first at step",
            "idle-machine training time (steps x median step): paper / fast",
            "ratio",
        ],
        lines,
    )


# --- how the fast recipe was chosen (validation splits) ---------------------------------------------

RECIPE_SEARCH = [
    ("paper recipe (1e-3 constant, batch 16, fp32)", "paper-lr1e-3-b16"),
    ("fast recipe (3e-3, warm-up 100, cosine, batch 32, bf16; dropout 0.1 then)", "fast-lr3e-3-cos-b32-bf16"),
]
RECIPE_SEARCH_STEPS = (250, 750, 1250, 1750, 2250, 3000)


def recipe_search_table() -> str:
    lines = []
    for label, name in RECIPE_SEARCH:
        records = {r["step"]: r for r in whole_split(_jsonl(RESULTS / "recipe_search" / name / "metrics.jsonl"))}
        lines.append([label] + [f"{100 * records[step]['accuracy']:.1f}" for step in RECIPE_SEARCH_STEPS])
    return _markdown(
        ["val accuracy at step (the whole 5,000-image val split)"] + [f"{s:,}" for s in RECIPE_SEARCH_STEPS], lines
    )


def lr_probe_table() -> str:
    folder = RESULTS / "recipe_probe" / "fashion_lr" / "runs"
    runs = sorted(folder.iterdir(), key=lambda run: _json(run / "config.json")["lr"])
    lines, steps = [], None
    for run in runs:
        config, records = _json(run / "config.json"), _jsonl(run / "metrics.jsonl")
        steps = [(r["step"], r["split"]) for r in records]
        test = _json(run / "evaluation.json")["splits"]["test"]
        label = f"lr {_rate(config['lr'])}" + (" (the recipe's)" if config["lr"] == 3e-3 else "")
        lines.append([label] + [_pct(r["accuracy"]) for r in records] + [_pct(test["accuracy"])])
    return _markdown(
        ["val accuracy at step"] + [f"{step:,} ({split})" for step, split in steps] + ["test, scored once at the end"],
        lines,
    )


DROPOUT_PROBE = [
    ("Fashion-MNIST", "fashion", {"dropout": "0.1", "pooling": "last"}),
    ("Fashion-MNIST", "fashion", {"dropout": "0.1", "pooling": "mean"}),
    ("Fashion-MNIST", "fashion", {"dropout": "0.0", "pooling": "last"}),
    ("Fashion-MNIST", "fashion", {"dropout": "0.0", "pooling": "mean"}),
    ("MNIST", "mnist", {"dropout": "0.1"}),
    ("MNIST", "mnist", {"dropout": "0.0"}),
]


def dropout_probe_table() -> str:
    lines = []
    for task, folder, values in DROPOUT_PROBE:
        with open(RESULTS / "recipe_probe" / folder / "results.csv", newline="") as handle:
            row = next(r for r in csv.DictReader(handle) if all(r[k] == v for k, v in values.items()))
        pooling = {"last": "last token", "mean": "mean of tokens"}[values.get("pooling", "last")]
        lines.append(
            [
                f"{task}, dropout {float(values['dropout']):g}, {pooling}",
                _pct(float(row["eval_accuracy"])),
                _pct(float(row["accuracy"])),
            ]
        )
    return _markdown(
        ["fast recipe, 2,000 steps", "val at step 2,000 (all 5,000)", "test, scored once at the end"], lines
    )


def _score(metric: str, value: float) -> str:
    """Accuracy as a percentage, R² as it is."""
    return _pct(value) if metric == "accuracy" else f"{value:.2f}"


def _small_data_sets() -> list[dict]:
    selection = _json(RESULTS / "small_data" / "selection.json")
    return [_json(RESULTS / "small_data" / f"{name}.json") for name in selection["sets"]]


def small_data_validation_table() -> str:
    """benchmarks/small_data.py: every candidate recipe's validation score on each set (accuracy %, R² for
    diabetes) with its steps, the best baseline's on the same rows, and each candidate's mean gap to it,
    which chose."""
    selection = _json(RESULTS / "small_data" / "selection.json")
    sets = _small_data_sets()
    default = selection["default"]  # the former default first, then the rest (the file sorts them by name)
    candidates = [default, *(c for c in sets[0]["candidates"] if c != default)]
    rows = []
    for record in sets:
        metric = "r2" if record["set"] == "diabetes" else "accuracy"
        first = record["candidates"][candidates[0]]
        best = max(first["baselines"], key=first["baselines"].get)
        cells = [
            f"{_score(metric, record['candidates'][c]['fpt'])} ({record['candidates'][c]['steps']})" for c in candidates
        ]
        rows.append([record["set"], *cells, f"{_score(metric, first['baselines'][best])} ({best})"])
    gaps = [f"{selection['mean_gap'][c]:+.3f}" + (" (chosen)" if c == selection["chosen"] else "") for c in candidates]
    rows.append(["mean gap to the best baseline", *gaps, "-"])
    return _markdown(["set", *candidates, "best baseline"], rows)


def small_data_test_table() -> str:
    """benchmarks/small_data.py: the test split, scored once after the choice: fpt's chosen recipe and the
    estimators' former default, beside the baselines fitted on all the training rows."""
    selection = _json(RESULTS / "small_data" / "selection.json")
    chosen, default = (f"fpt, {selection[key]}" for key in ("chosen", "default"))
    rows = []
    for name in selection["sets"]:
        scored = selection["test"][name]
        scores, metric = scored["scores"], scored["metric"]
        linear = "LogisticRegression" if metric == "accuracy" else "Ridge"
        trees = "HistGradientBoosting" + ("Classifier" if metric == "accuracy" else "Regressor")
        cells = [_score(metric, scores[key]) for key in (chosen, default, linear, trees)]
        rows.append(
            [name, "accuracy %" if metric == "accuracy" else "R²", f"{scored['rows'][0]} / {scored['rows'][1]}"] + cells
        )
    header = ["set", "metric", "train / test rows", f"{chosen} (chosen)", default]
    return _markdown(header + ["LogisticRegression / Ridge", "HistGradientBoosting"], rows)


def ucr_budget_table() -> str:
    """benchmarks/ucr_budget.py: each candidate budget's validation accuracy on each UCR/UEA set (its steps in
    brackets) and the mean over the sets, which chose."""
    selection = _json(RESULTS / "ucr_budget" / "selection.json")
    validation, steps, chosen = selection["validation"], selection["steps"], selection["chosen"]
    candidates = list(validation)
    rows = [
        [name, *(f"{100 * validation[c][name]:.1f} ({steps[c][name]})" for c in candidates)]
        for name in validation[candidates[0]]
    ]
    means = [f"{100 * selection['validation_mean'][c]:.1f}" + (" (chosen)" if c == chosen else "") for c in candidates]
    return _markdown(["set", *candidates], [*rows, ["mean", *means]])


def ucr_budget_test_table() -> str:
    """benchmarks/ucr_budget.py: the test split of the chosen budget and of the former default, read only after
    the choice."""
    test = _json(RESULTS / "ucr_budget" / "selection.json")["test"]
    tested = list(test)
    rows = [[name, *(f"{100 * test[t][name]:.1f}" for t in tested)] for name in test[tested[0]]]
    return _markdown(["set: test accuracy %", *tested], rows)
