"""How far ListOps goes without its nesting: answer from the outermost operator alone.

    .venv/bin/python benchmarks/listops_shortcut.py [--data-dir DIR]

The rule: for each outermost operator (MIN, MAX, MED, SM), the answer most frequent among the
training expressions that start with it. It reads nothing past the first operator, so it needs
no brackets. Its accuracy on val and test, and which answers it gets right, say how much of a
model's score a shortcut can explain (the converged ListOps runs in benchmarks/converged.md score 36-37).
No training, no torch: counting only.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np

from fpt.core.paths import data_dir
from fpt.data.listops import ensure_listops_tsv
from fpt.data.lra_tsv import OPERATORS, load_listops_dir


def outer_operator(source: str) -> str:
    return next(token for token in source.split() if token in OPERATORS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="folder of basic_{train,val,test}.tsv (default: the set fpt generates, as --task listops does)",
    )
    args = parser.parse_args()
    directory = args.data_dir or ensure_listops_tsv(data_dir("listops"))  # the set `fpt train` uses
    sources, labels = load_listops_dir(directory, "train")
    by_operator: dict[str, Counter] = {}
    for source, label in zip(sources, labels):
        by_operator.setdefault(outer_operator(source), Counter())[int(label)] += 1
    rule = {op: counts.most_common(1)[0][0] for op, counts in by_operator.items()}
    print(f"data: {directory}")
    print("rule (outermost operator -> answer): " + ", ".join(f"{op[1:]} -> {rule[op]}" for op in OPERATORS))
    for split in ("val", "test"):
        sources, labels = load_listops_dir(directory, split)
        guesses = np.array([rule[outer_operator(source)] for source in sources])
        right = guesses == labels
        per_class = {c: f"{100 * right[labels == c].mean():.0f}" for c in range(10) if (labels == c).any()}
        print(
            f"{split}: {100 * right.mean():.2f}% of {len(labels)}; label prior "
            f"{100 * np.bincount(labels).max() / len(labels):.2f}%; right per answer (%): {per_class}"
        )


if __name__ == "__main__":
    main()
