"""The LRA ListOps generator, checked by evaluators and a node-by-node reference written here."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

from fpt.core.errors import FptError
from fpt.data import listops
from fpt.data.listops import ensure_listops_tsv, generate_listops
from fpt.data.lra_tsv import load_listops_dir

OPS = {"[MIN": min, "[MAX": max, "[MED": lambda args: int(np.median(args)), "[SM": lambda args: sum(args) % 10}


def evaluate_with_stack(source: str) -> tuple[int, int, list[int]]:
    """Value, deepest leaf depth (root = 1) and operator arities, ignoring parentheses."""
    frames: list[list] = [[]]  # one open argument list per operator, under a root frame
    deepest, arities = 0, []
    for token in source.replace("(", " ").replace(")", " ").split():
        if token in OPS:
            frames.append([token])
        elif token == "]":
            op, *args = frames.pop()
            arities.append(len(args))
            frames[-1].append(OPS[op](args))
        else:
            deepest = max(deepest, len(frames))
            frames[-1].append(int(token))
    assert len(frames) == 1 and len(frames[0]) == 1, "unbalanced expression"
    return frames[0][0], deepest, arities


def evaluate_printed_pairs(source: str) -> int:
    """Parse LRA's printing exactly (term := digit | op | ']' | '(' term term ')') and evaluate it."""
    tokens = source.split()

    def parse(i: int):
        if tokens[i] == "(":
            left, i = parse(i + 1)
            right, i = parse(i)
            assert tokens[i] == ")", f"expected ')' at token {i}"
            return (left, right), i + 1
        return tokens[i], i + 1

    def value(node) -> int:
        if isinstance(node, str):
            return int(node)
        parts = []  # an operator node is ((((op, a1), a2) ...), "]"): walk its left spine
        while isinstance(node, tuple):
            node, right = node
            parts.append(right)
        *args, close = reversed(parts)
        assert node in OPS and close == "]" and len(args) >= 1
        return OPS[node]([value(arg) for arg in args])

    tree, end = parse(0)
    assert end == len(tokens), "trailing tokens"
    return value(tree)


def lra_length(source: str) -> int:
    return len(source.replace("(", " ").replace(")", " ").split())


@pytest.fixture(scope="module")
def small_set():
    return generate_listops(n_train=150, n_val=20, n_test=30, seed=3)


def test_splits_have_requested_sizes_and_labels(small_set):
    assert [len(small_set[s][0]) for s in ("train", "val", "test")] == [150, 20, 30]
    for sources, labels in small_set.values():
        assert labels.dtype == np.int64 and len(labels) == len(sources)
        assert labels.min() >= 0 and labels.max() <= 9


def test_every_expression_follows_lra_rules_and_label_is_its_value(small_set):
    seen_ops = set()
    for sources, labels in small_set.values():
        for source, label in zip(sources, labels):
            value, deepest, arities = evaluate_with_stack(source)
            assert label == value == evaluate_printed_pairs(source)
            assert 500 < lra_length(source) < 2000
            assert deepest <= 10
            assert all(2 <= k <= 10 for k in arities)
            seen_ops.update(t for t in source.split() if t.startswith("["))
    assert seen_ops == set(OPS)


def test_no_expression_repeats_across_splits(small_set):
    everything = [s for sources, _ in small_set.values() for s in sources]
    assert len(set(everything)) == len(everything)


def test_same_seed_same_data_other_seed_other_data(small_set):
    again = generate_listops(n_train=150, n_val=20, n_test=30, seed=3)
    for split in small_set:
        assert again[split][0] == small_set[split][0]
        np.testing.assert_array_equal(again[split][1], small_set[split][1])
    other = generate_listops(n_train=150, n_val=20, n_test=30, seed=4)
    assert set(other["train"][0]).isdisjoint(small_set["train"][0])


def test_relaxed_bounds_for_small_trees():
    data = generate_listops(40, 5, 5, seed=0, min_length=0, max_length=12, max_depth=3, max_args=3)
    sources = [s for split in data.values() for s in split[0]]
    assert len(set(sources)) == 50
    assert any(s.isdigit() for s in sources)  # a lone digit is a tree of length 1
    for sources, labels in data.values():
        for source, label in zip(sources, labels):
            value, deepest, arities = evaluate_with_stack(source)
            assert label == value == evaluate_printed_pairs(source)
            assert lra_length(source) < 12 and deepest <= 3 and all(2 <= k <= 3 for k in arities)


def reference_sample(n: int, seed: int) -> list[str]:
    """LRA's algorithm node by node with Python's random: distinct trees of 500 < length < 2000."""
    rng = random.Random(seed)

    def tree(depth: int) -> list[str]:
        if depth < 10 and rng.random() <= 0.25:  # LRA: a digit when random() > VALUE_P = 0.25
            args = [tree(depth + 1) for _ in range(rng.randint(2, 10))]
            return [rng.choice(list(OPS))] + [t for arg in args for t in arg] + ["]"]
        return [str(rng.randrange(10))]

    found: dict[str, None] = {}
    while len(found) < n:
        tokens = tree(1)
        if 500 < len(tokens) < 2000:
            found[" ".join(tokens)] = None
    return list(found)


def summary(sources: list[str]) -> dict[str, float]:
    arities, lengths, ops = [], [], []
    for source in sources:
        _, _, node_arities = evaluate_with_stack(source)
        arities += node_arities
        lengths.append(lra_length(source))
        ops += [t for t in source.split() if t in OPS]
    return {
        "length": float(np.mean(lengths)),
        "arity": float(np.mean(arities)),
        **{op: ops.count(op) / len(ops) for op in OPS},
    }


@pytest.mark.slow
def test_distribution_matches_node_by_node_reference():
    """Level-by-level drawing must give LRA's distribution (tolerances ~4 standard errors)."""
    ours = summary(generate_listops(800, 0, 0, seed=11)["train"][0])
    reference = summary(reference_sample(800, seed=11))
    assert abs(ours["length"] - reference["length"]) < 80
    assert abs(ours["arity"] - reference["arity"]) < 0.1
    for op in OPS:
        assert abs(ours[op] - 0.25) < 0.01 and abs(reference[op] - 0.25) < 0.01


def test_impossible_settings_fail_with_a_clear_error():
    with pytest.raises(FptError, match="widen the length bounds"):
        generate_listops(1, 0, 0, min_length=5000, max_length=6000, max_depth=3)
    with pytest.raises(FptError, match="widen the length bounds"):
        generate_listops(1, 0, 0, min_length=10, max_length=11)
    # Depth 1 allows only the ten lone digits.
    with pytest.raises(FptError, match="only 10 distinct"):
        generate_listops(20, 0, 0, min_length=0, max_length=5, max_depth=1)


def test_ensure_listops_tsv_writes_once_and_reuses(tmp_path, monkeypatch):
    settings = dict(seed=5, n_train=30, n_val=4, n_test=6, min_length=20, max_length=200)
    directory = ensure_listops_tsv(tmp_path, **settings)
    assert sorted(os.listdir(directory)) == ["basic_test.tsv", "basic_train.tsv", "basic_val.tsv"]
    expected = generate_listops(30, 4, 6, seed=5, min_length=20, max_length=200)
    for split in ("train", "val", "test"):
        sources, labels = load_listops_dir(directory, split)
        assert sources == expected[split][0]
        np.testing.assert_array_equal(labels, expected[split][1])

    def refuse(*args, **kwargs):
        raise AssertionError("regenerated although the files exist")

    monkeypatch.setattr(listops, "generate_listops", refuse)
    assert ensure_listops_tsv(tmp_path, **settings) == directory
    other = dict(settings, seed=6)
    with pytest.raises(AssertionError):
        ensure_listops_tsv(tmp_path, **other)  # other settings need their own files


def test_a_max_len_below_one_is_refused_before_the_set_is_generated(tmp_path, monkeypatch):
    from fpt.tasks import create_task

    monkeypatch.setenv("FPT_CACHE_DIR", str(tmp_path / "cache"))
    for bad in (0, -1):  # 0 was read as "the protocol's default"
        with pytest.raises(FptError, match="--max-len must be a whole number of at least 1"):
            create_task("listops", max_len=bad)
    assert not (tmp_path / "cache").exists()
