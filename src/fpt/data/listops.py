"""The Long Range Arena ListOps generator, drawn level by level with numpy.

LRA's algorithm (lra_benchmarks/data/listops.py): a tree is drawn from the root at depth 1.
A node above ``max_depth`` is an operator with probability 0.25 (LRA's ``VALUE_P``: the
node is a digit when ``random() > 0.25``), otherwise a digit 0-9; nodes at ``max_depth``
are digits. An operator has ``randint(2, max_args)`` arguments and is one of MIN, MAX,
MED, SM, uniformly. A tree's length counts its operators, digits and closing brackets;
it is kept when ``min_length < length < max_length`` and not already drawn. Its value:
MIN, MAX, MED = ``int(np.median(args))``, SM = sum mod 10. LRA prints each tree as nested
pairs, ``[MAX 2 9 ]`` as ``( ( ( [MAX 2 ) 9 ) ] )``.

Drawing 100k trees of ~1000 nodes node by node in Python takes minutes. Every choice a
node makes is independent given its depth, so drawing a batch of trees one depth at a
time with numpy gives the same distribution; a tree that has already reached
``max_length`` tokens stops growing (it will be rejected anyway). LRA kept its samples in
a Python set, so its split order depended on the hash seed; here the samples keep the
order they were drawn in, and the same seed gives the same files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fpt.core.errors import FptError
from fpt.data.lra_tsv import CLOSE, OPERATORS, SPLITS, write_listops_tsv

P_OPERATOR = 0.25
# Candidate roots drawn per numpy batch: ~8% become samples; bigger costs memory, not speed.
_ROOTS_PER_BATCH = 8192
# Batches in a row that add no new sample before we conclude the settings cannot fill the splits.
_MAX_FRUITLESS_BATCHES = 50


@dataclass
class _Level:
    """The nodes at one depth of a batch of trees, children grouped by parent, in order."""

    tree: np.ndarray  # which tree of the batch each node belongs to
    parent: np.ndarray  # index of the parent in the level above (-1 for roots)
    n_args: np.ndarray  # number of arguments (0 for a digit)
    op: np.ndarray  # index into OPERATORS (-1 for a digit)
    digit: np.ndarray  # the value of a digit (ignored for operators)


def _grow(
    rng: np.random.Generator, n_roots: int, max_depth: int, max_args: int, max_length: int
) -> tuple[list[_Level], np.ndarray]:
    """Draw ``n_roots`` trees; return their levels and lengths (exact below ``max_length``)."""
    levels: list[_Level] = []
    tree = np.arange(n_roots)
    parent = np.full(n_roots, -1)
    length = np.zeros(n_roots, dtype=np.int64)
    for depth in range(1, max_depth + 1):
        n = tree.size
        is_op = rng.random(n) <= P_OPERATOR if depth < max_depth else np.zeros(n, dtype=bool)
        n_args = np.where(is_op, rng.integers(2, max_args + 1, n), 0)
        op = np.where(is_op, rng.integers(0, len(OPERATORS), n), -1)
        levels.append(_Level(tree, parent, n_args, op, rng.integers(0, 10, n)))
        # An operator counts twice (itself and its "]"), a digit once.
        length += np.bincount(tree, weights=1 + is_op, minlength=n_roots).astype(np.int64)
        grows = is_op & (length[tree] < max_length)
        parent = np.repeat(np.flatnonzero(grows), n_args[grows])
        if parent.size == 0:
            break
        tree = tree[parent]
    return levels, length


def _select(levels: list[_Level], keep: np.ndarray) -> list[_Level]:
    """The levels of the trees where ``keep`` is true, renumbered from 0."""
    new_tree = np.cumsum(keep) - 1
    selected: list[_Level] = []
    new_index = None  # position of each kept node of the level above among kept nodes
    for level in levels:
        mask = keep[level.tree]
        if not mask.any():
            break
        parent = level.parent[mask] if new_index is None else new_index[level.parent[mask]]
        selected.append(
            _Level(new_tree[level.tree[mask]], parent, level.n_args[mask], level.op[mask], level.digit[mask])
        )
        new_index = np.cumsum(mask) - 1
    return selected


def _apply_operators(op: np.ndarray, n_args: np.ndarray, args: np.ndarray) -> np.ndarray:
    """Values of operator nodes whose arguments lie consecutively in ``args``."""
    starts = np.cumsum(n_args) - n_args
    group = np.repeat(np.arange(op.size), n_args)
    ordered = args[np.lexsort((args, group))]
    # int(np.median): the mean of the two middle values, truncated (values are >= 0).
    median = (ordered[starts + (n_args - 1) // 2] + ordered[starts + n_args // 2]) // 2
    results = {
        "[MIN": np.minimum.reduceat(args, starts),
        "[MAX": np.maximum.reduceat(args, starts),
        "[MED": median,
        "[SM": np.add.reduceat(args, starts) % 10,
    }
    return np.choose(op, [results[name] for name in OPERATORS])


def _sizes_and_values(levels: list[_Level]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per level, each node's subtree length in tokens and its value, from the leaves up."""
    sizes: list[np.ndarray] = [np.empty(0)] * len(levels)
    values: list[np.ndarray] = [np.empty(0)] * len(levels)
    for d in reversed(range(len(levels))):
        level = levels[d]
        is_op = level.n_args > 0
        size = 1 + is_op.astype(np.int64)
        value = level.digit.astype(np.int64)
        if is_op.any():
            child = levels[d + 1]
            size += np.bincount(child.parent, weights=sizes[d + 1], minlength=size.size).astype(np.int64)
            value[is_op] = _apply_operators(level.op[is_op], level.n_args[is_op], values[d + 1])
        sizes[d], values[d] = size, value
    return sizes, values


def _pieces(max_args: int) -> list[str]:
    """Printed text of each token code, LRA's pair printing folded into the tokens.

    A node's text opens one "(" per argument plus one before its operator, and every
    non-root node is followed by " )": codes 0-9 digits, 10-19 root digits, 20 "]" of a
    non-root operator, 21 "]" of the root, then operator starts by (op, n_args).
    """
    pieces = [f"{d} )" for d in range(10)] + [str(d) for d in range(10)]
    pieces += [f"{CLOSE} ) )", f"{CLOSE} )"]
    pieces += ["( " * (k + 1) + name for name in OPERATORS for k in range(max_args + 1)]
    return pieces


def _render(levels: list[_Level], sizes: list[np.ndarray], max_args: int) -> list[str]:
    """LRA's printed form of every tree in ``levels``."""
    length = sizes[0]
    first = np.cumsum(length) - length  # where each tree starts in one flat token array
    codes = np.empty(int(length.sum()), dtype=np.int64)
    start = first
    for d, level in enumerate(levels):
        if d > 0:
            # A node starts after its parent's operator and its earlier siblings.
            before = np.cumsum(sizes[d]) - sizes[d]
            eldest = np.searchsorted(level.parent, level.parent)
            start = start[level.parent] + 1 + before - before[eldest]
        is_op = level.n_args > 0
        root = 1 if d == 0 else 0
        codes[start[~is_op]] = level.digit[~is_op] + 10 * root
        codes[start[is_op]] = 22 + level.op[is_op] * (max_args + 1) + level.n_args[is_op]
        codes[start[is_op] + sizes[d][is_op] - 1] = 20 + root
    words = np.array(_pieces(max_args), dtype=object)[codes].tolist()
    ends = first + length
    return [" ".join(words[a:b]) for a, b in zip(first.tolist(), ends.tolist())]


def _max_tree_length(max_depth: int, max_args: int) -> int:
    length = 1
    for _ in range(max_depth - 1):
        length = 2 + max_args * length
    return length


def generate_listops(
    n_train: int = 96000,
    n_val: int = 2000,
    n_test: int = 2000,
    seed: int = 0,
    *,
    min_length: int = 500,
    max_length: int = 2000,
    max_depth: int = 10,
    max_args: int = 10,
) -> dict[str, tuple[list[str], np.ndarray]]:
    """Draw distinct ListOps expressions with LRA's algorithm and settings.

    Returns ``{"train": (sources, labels), "val": ..., "test": ...}``: LRA-printed source
    strings and int64 labels 0-9. The same seed gives the same data (for a numpy version).
    """
    if min(n_train, n_val, n_test) < 0 or max_depth < 1 or max_args < 2:
        raise FptError("ListOps needs non-negative split sizes, max_depth >= 1 and max_args >= 2")
    if min_length + 1 >= max_length or min_length >= _max_tree_length(max_depth, max_args):
        raise FptError(
            f"no ListOps tree has {min_length} < length < {max_length} with max_depth "
            f"{max_depth} and max_args {max_args}; widen the length bounds"
        )
    rng = np.random.default_rng(seed)
    needed = n_train + n_val + n_test
    examples: dict[str, int] = {}  # a dict keeps draw order and drops repeats
    fruitless = 0
    while len(examples) < needed:
        levels, length = _grow(rng, _ROOTS_PER_BATCH, max_depth, max_args, max_length)
        kept = _select(levels, (length > min_length) & (length < max_length))
        before = len(examples)
        if kept:
            sizes, values = _sizes_and_values(kept)
            for source, label in zip(_render(kept, sizes, max_args), values[0].tolist()):
                examples.setdefault(source, label)
                if len(examples) == needed:
                    break
        fruitless = fruitless + 1 if len(examples) == before else 0
        if fruitless >= _MAX_FRUITLESS_BATCHES:
            raise FptError(
                f"only {len(examples)} distinct ListOps trees found for {needed} requested; "
                "widen the length bounds or raise max_depth / max_args"
            )
    sources = list(examples)
    labels = np.fromiter(examples.values(), dtype=np.int64, count=len(examples))
    bounds = np.cumsum([0, n_train, n_val, n_test])
    return {split: (sources[a:b], labels[a:b]) for split, a, b in zip(SPLITS, bounds[:-1], bounds[1:])}


def ensure_listops_tsv(
    cache_dir: str | Path,
    seed: int = 0,
    n_train: int = 96000,
    n_val: int = 2000,
    n_test: int = 2000,
    *,
    min_length: int = 500,
    max_length: int = 2000,
    max_depth: int = 10,
    max_args: int = 10,
) -> Path:
    """A directory of LRA-format ``basic_{train,val,test}.tsv`` files for these settings.

    Generated on first use under ``cache_dir`` (a sub-folder named by the settings) and
    reused afterwards; each file is written atomically, so an interrupted run leaves no
    half file. Read the splits with :func:`fpt.data.lra_tsv.load_listops_dir`.
    """
    name = (
        f"listops-seed{seed}-n{n_train}-{n_val}-{n_test}-len{min_length}-{max_length}-depth{max_depth}-args{max_args}"
    )
    directory = Path(cache_dir) / name
    paths = {split: directory / f"basic_{split}.tsv" for split in SPLITS}
    if all(path.is_file() for path in paths.values()):
        return directory
    splits = generate_listops(
        n_train,
        n_val,
        n_test,
        seed,
        min_length=min_length,
        max_length=max_length,
        max_depth=max_depth,
        max_args=max_args,
    )
    try:
        for split, (sources, labels) in splits.items():
            write_listops_tsv(paths[split], sources, labels)
    except OSError as e:
        raise FptError(
            f"cannot write ListOps files to {directory} ({e.strerror or e}); choose a writable cache directory"
        ) from None
    return directory
