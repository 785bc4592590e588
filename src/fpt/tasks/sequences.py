"""Token and vector sequences: ListOps, TAPE remote homology, and your own arrays (npz:PATH).

Sequences of different lengths are stored right-padded with their lengths; a batch is cut to
its longest member and masked. Sequences longer than the task's maximum are cut, never dropped,
and counted in `notes` (which lands in the run's summary).
"""

from __future__ import annotations

import numpy as np

from fpt.core.errors import MISSING_DATA, FptError
from fpt.core.paths import data_dir as default_data_dir
from fpt.core.paths import user_path
from fpt.tasks.arrays import ArrayTask, Split, check_labels
from fpt.tasks.base import TaskSpec, check_protocol
from fpt.tasks.registry import register_task


class SequenceTask(ArrayTask):
    """Single-label classification of token sequences (or vector sequences for npz)."""

    def __init__(
        self,
        name: str,
        train: Split,
        evals: dict[str, Split],
        eval_split: str,
        num_classes: int,
        seq_len: int,
        vocab_size: int | None = None,
        input_dim: int | None = None,
        notes: dict | None = None,
    ):
        self.name = name
        super().__init__(train, evals, eval_split)
        self.spec = TaskSpec(seq_len=seq_len, num_classes=num_classes, vocab_size=vocab_size, input_dim=input_dim)
        self.notes = notes or {}
        for split_name, split in {"train": train, **evals}.items():
            check_labels(split, num_classes, f"{name} {split_name} split")


def _compact(ids: np.ndarray) -> np.ndarray:
    """Token ids (>= 0) in the smallest integer type that holds them (ListOps at int64 would be
    1.5 GB), checked by a round trip: a GPT-2 id of 50256 must not wrap to a small valid id."""
    largest = int(ids.max(initial=0))
    kind = next(t for t in (np.uint8, np.int16, np.int32, np.int64) if largest <= np.iinfo(t).max)
    compact = ids.astype(kind)
    if not np.array_equal(compact, ids):  # pragma: no cover - the choice above makes this impossible
        raise FptError(f"token ids up to {largest} do not fit {np.dtype(kind).name}")
    return compact


def _features(x: np.ndarray, where: str) -> np.ndarray:
    """Feature vectors as float32, refusing NaN and values beyond float32 (they would become inf)."""
    features = x.astype(np.float32)
    if not np.isfinite(features).all():
        raise FptError(f"{where}: x holds NaN, inf or values beyond float32 (|x| > 3.4e38); clean the array first")
    return features


@register_task("listops")
def listops(data_dir: str | None = None, protocol: str = "lra", max_len: int | None = None) -> SequenceTask:
    """ListOps (Long Range Arena): nested MIN/MAX/MED/SM expressions over digits, answer 0-9.

    Reads LRA's basic_{train,val,test}.tsv from --data-dir, or generates them once with the LRA
    algorithm into the fpt cache. protocol "lra" keeps the brackets (max 2000 tokens); "paper"
    reproduces the official FPT code's input (brackets stripped, 512 tokens) for a like-for-like
    comparison with the paper's 38.4%, and is unsolvable by construction.
    """
    from fpt.data.listops import ensure_listops_tsv
    from fpt.data.lra_tsv import PROTOCOL_MAX_LEN, VOCAB, load_listops_dir, tokenize_listops

    check_protocol(protocol, tuple(PROTOCOL_MAX_LEN), "listops")
    if max_len is not None and max_len < 1:  # before the set is generated
        raise FptError(f"--max-len must be at least 1, got {max_len}")
    if data_dir is not None:
        folder = user_path(data_dir)
        if not folder.is_dir():
            raise FptError(
                f"no ListOps data at {folder}: pass the folder holding LRA's basic_*.tsv, "
                "or leave --data-dir out to generate the set"
            )
    else:
        folder = ensure_listops_tsv(default_data_dir("listops"))
    length = PROTOCOL_MAX_LEN[protocol] if max_len is None else max_len
    splits, truncated = {}, {}
    for split in ("train", "val", "test"):
        sources, labels = load_listops_dir(folder, split)
        ids, mask, cut = tokenize_listops(sources, max_len=length, protocol=protocol)
        splits[split] = Split.from_numpy(_compact(ids), labels, mask)
        truncated[split] = cut
    return SequenceTask(
        "listops",
        splits["train"],
        {"val": splits["val"], "test": splits["test"]},
        "val",
        num_classes=10,
        seq_len=length,
        vocab_size=len(VOCAB),
        notes={"protocol": protocol, "max_len": length, "truncated": truncated},
    )


@register_task("remote-homology")
def remote_homology(data_dir: str | None = None, max_len: int = 1024) -> SequenceTask:
    """TAPE remote homology: protein sequences -> one of 1195 folds; three test holdouts."""
    from fpt.data.tape import IUPAC_VOCAB, SPLITS, encode_proteins, load_remote_homology

    folder = user_path(data_dir) if data_dir else default_data_dir("remote-homology")
    if not folder.is_dir():
        raise FptError(
            f"no remote homology data at {folder}: pass --data-dir holding TAPE's remote_homology/ "
            "folder (from http://s3.amazonaws.com/songlabdata/proteindata/data_pytorch/remote_homology.tar.gz)",
            kind=MISSING_DATA,
        )
    splits, truncated = {}, {}
    for split in SPLITS:
        sequences, labels = load_remote_homology(folder, split)
        ids, mask, cut = encode_proteins(sequences, max_len=max_len)
        splits[split] = Split.from_numpy(_compact(ids), labels, mask)
        truncated[split] = cut
    train = splits.pop("train")
    return SequenceTask(
        "remote-homology",
        train,
        splits,
        "valid",
        num_classes=1195,
        seq_len=max_len,
        vocab_size=len(IUPAC_VOCAB),
        notes={"max_len": max_len, "truncated": truncated},
    )


@register_task("npz")
def npz(path: str, test_path: str | None = None, heldout_fraction: float = 0.1) -> SequenceTask:
    """Your own data: `--task npz:PATH`, arrays x (N, L, D) floats or (N, L) token ids, y (N,).

    With --test-path the second file is the evaluation split; otherwise a fixed, seeded
    `heldout_fraction` of the file is held out (the same examples on every run).
    """
    from fpt.data.npz import load_npz_task

    x, y, mask = load_npz_task(path)
    if test_path is not None:
        test = load_npz_task(test_path)
        if test[0].dtype.kind != x.dtype.kind or test[0].shape[2:] != x.shape[2:]:
            raise FptError(
                f"{test_path}: x is {test[0].dtype} {test[0].shape[1:]}, but the training file's is "
                f"{x.dtype} {x.shape[1:]}; both files need the same kind of rows"
            )
        eval_name = "test"
        evaluated_on = f"evaluated on {test_path} while training"
    else:
        if not 0 < heldout_fraction < 1:
            raise FptError(f"--heldout-fraction must be in (0, 1), got {heldout_fraction}")
        order = np.random.default_rng(0).permutation(len(y))
        cut = max(1, int(round(len(y) * heldout_fraction)))
        if cut >= len(y):
            raise FptError(f"{path}: {len(y)} examples are too few to hold some out; give --test-path")
        held, kept = order[:cut], order[cut:]
        test = (x[held], y[held], mask[held])
        x, y, mask = x[kept], y[kept], mask[kept]
        eval_name = "heldout"
        evaluated_on = (
            f"{cut:,} of {len(order):,} examples held out to evaluate on while training, a fixed draw "
            f"(--heldout-fraction {heldout_fraction:g}; --test-path FILE evaluates on another file)"
        )
    classes = np.unique(np.concatenate([y, test[1]]))
    if len(classes) < 2:
        raise FptError(f"{path}: every label is {classes[0]}; a classifier needs examples of at least two classes")
    tokens = np.issubdtype(x.dtype, np.integer)
    train = Split.from_numpy(_compact(x) if tokens else _features(x, path), y, mask)
    evaluation = Split.from_numpy(
        _compact(test[0]) if tokens else _features(test[0], test_path or path), test[1], test[2]
    )
    vocab = int(max(x.max(initial=0), test[0].max(initial=0))) + 1 if tokens else None
    return SequenceTask(
        f"npz:{path}",
        train,
        {eval_name: evaluation},
        eval_name,
        num_classes=int(max(y.max(initial=0), test[1].max(initial=0))) + 1,
        seq_len=x.shape[1],
        vocab_size=vocab,
        input_dim=None if tokens else x.shape[2],
        notes={"evaluated_on": evaluated_on},
    )
