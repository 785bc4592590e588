"""TAPE remote homology: LMDB or JSON records, and TAPE's IUPAC amino-acid vocabulary.

TAPE's release (http://s3.amazonaws.com/songlabdata/proteindata/data_pytorch/remote_homology.tar.gz)
unpacks to ``remote_homology/remote_homology_{split}.lmdb``: an LMDB environment whose key
``b"num_examples"`` holds the count and keys ``b"0"``, ``b"1"``... pickled dicts with
``primary`` (the sequence), ``protein_length`` and ``fold_label`` (0..1194), among others.
The pickles are read with the restricted unpickler (plain values and numpy arrays only).
The JSON release holds the same records as one list.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from fpt.core.errors import MISSING_DATA, FptError, require
from fpt.data import pad_rows
from fpt.data.safe_pickle import safe_loads

SPLITS = ("train", "valid", "test_fold_holdout", "test_superfamily_holdout", "test_family_holdout")
N_FOLDS = 1195
# TAPE's IUPAC tokenizer: 5 special tokens, then 25 letters (no J), 30 ids.
IUPAC_VOCAB: tuple[str, ...] = ("<pad>", "<mask>", "<cls>", "<sep>", "<unk>", *"ABCDEFGHIKLMNOPQRSTUVWXYZ")
TOKEN_IDS: dict[str, int] = {token: i for i, token in enumerate(IUPAC_VOCAB)}
PAD_ID, CLS_ID, SEP_ID, UNK_ID = (TOKEN_IDS[t] for t in ("<pad>", "<cls>", "<sep>", "<unk>"))
_WHERE = "download and unpack http://s3.amazonaws.com/songlabdata/proteindata/data_pytorch/remote_homology.tar.gz there"


def read_tape_lmdb(path: str | Path) -> list[dict[str, Any]]:
    """All records of a TAPE LMDB (a directory holding data.mdb, or a single file)."""
    lmdb = require("lmdb", "pip install lmdb (or pip install 'fpt[tape]')")  # only TAPE's format needs it

    path = Path(path)
    if not path.exists():
        raise FptError(f"{path}: no such LMDB; {_WHERE}")
    try:
        env = lmdb.open(
            str(path), subdir=path.is_dir(), readonly=True, lock=False, readahead=False, meminit=False, max_readers=1
        )
    except lmdb.Error as e:
        raise FptError(f"{path}: unreadable LMDB ({e}); expected TAPE's remote_homology_<split>.lmdb") from None
    try:
        with env.begin() as txn:
            raw_count = txn.get(b"num_examples")
            if raw_count is None:
                raise FptError(f"{path}: LMDB has no 'num_examples' key; not a TAPE dataset")
            count = safe_loads(raw_count, f"{path} [num_examples]")
            if not isinstance(count, int) or count < 0:
                raise FptError(f"{path}: 'num_examples' is {count!r}, expected a count")
            records = []
            for i in range(count):
                raw = txn.get(str(i).encode())
                if raw is None:
                    raise FptError(f"{path}: record {i} of {count} missing; the LMDB is incomplete")
                records.append(safe_loads(raw, f"{path} [record {i}]"))
    except lmdb.Error as e:
        raise FptError(f"{path}: unreadable LMDB ({e}); download it again") from None
    finally:
        env.close()
    return records


def read_tape_json(path: str | Path) -> list[dict[str, Any]]:
    """All records of a TAPE JSON file (a list of objects)."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            records = json.load(f)
    except FileNotFoundError:
        raise FptError(f"{path}: no such JSON file; {_WHERE}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FptError(f"{path}: unreadable or truncated JSON ({e})") from None
    if not isinstance(records, list):
        raise FptError(f"{path}: expected a JSON list of records, found {type(records).__name__}")
    return records


def records_to_sequences(records: list[Any], path: Path) -> tuple[list[str], np.ndarray]:
    """TAPE records -> (amino-acid strings, fold labels as int64), each record checked: a dict with a string `primary`
    and a `fold_label` in 0..N_FOLDS-1 (and a `protein_length`, if any, equal to its length)."""
    sequences: list[str] = []
    labels: list[int] = []
    for i, record in enumerate(records):
        where = f"{path}, record {i}"
        if not isinstance(record, dict):
            raise FptError(f"{where}: expected a dict with primary and fold_label, found {type(record).__name__}")
        primary, label = record.get("primary"), record.get("fold_label")
        if not isinstance(primary, str):
            raise FptError(f"{where}: expected 'primary' an amino-acid string, found {type(primary).__name__}")
        if isinstance(label, np.ndarray) and label.size == 1:
            label = label.item()
        if isinstance(label, bool) or not isinstance(label, (int, np.integer)) or not 0 <= label < N_FOLDS:
            raise FptError(f"{where}: 'fold_label' is {label!r}, expected an integer 0..{N_FOLDS - 1}")
        length = record.get("protein_length")
        if isinstance(length, np.ndarray) and length.size == 1:
            length = length.item()
        if length is not None and (isinstance(length, bool) or not isinstance(length, (int, np.integer))):
            raise FptError(f"{where}: 'protein_length' is {length!r}, expected an integer (or no such key)")
        if length is not None and length != len(primary):
            raise FptError(f"{where}: protein_length {length} but primary has {len(primary)} residues")
        sequences.append(primary)
        labels.append(int(label))
    return sequences, np.asarray(labels, dtype=np.int64)


def load_remote_homology(directory: str | Path, split: str) -> tuple[list[str], np.ndarray]:
    """Sequences and fold labels (int64, 0..1194) of one remote homology split.

    ``directory`` is TAPE's data folder (holding ``remote_homology/``) or that folder
    itself; ``remote_homology_{split}.lmdb`` is preferred over ``.json``.
    """
    if split not in SPLITS:
        raise FptError(f"unknown remote homology split {split!r}: expected one of {', '.join(SPLITS)}")
    directory = Path(directory)
    for folder in (directory / "remote_homology", directory):
        for suffix, read in ((".lmdb", read_tape_lmdb), (".json", read_tape_json)):
            path = folder / f"remote_homology_{split}{suffix}"
            if path.exists():
                return records_to_sequences(read(path), path)
    raise FptError(
        f"no remote homology {split} split in {directory}: expected "
        f"remote_homology/remote_homology_{split}.lmdb (or .json); {_WHERE}",
        kind=MISSING_DATA,
    )


def _letter_ids() -> np.ndarray:
    ids = np.full(256, UNK_ID, dtype=np.int64)
    for token, i in TOKEN_IDS.items():
        if len(token) == 1:
            ids[ord(token)] = i
    return ids


_LETTER_IDS = _letter_ids()


def encode_proteins(sequences: Sequence[str], max_len: int = 1024) -> tuple[np.ndarray, np.ndarray, int]:
    """Encode sequences as TAPE does: ``<cls>`` residues ``<sep>``, letters outside the vocabulary -> ``<unk>``.

    A sequence longer than ``max_len - 2`` residues keeps its first ones (and its
    ``<sep>``); it is counted, never dropped. Returns ids int64 (N, width) padded with 0,
    mask bool (N, width), and the number of sequences cut; ``width`` is the longest row.
    """
    if max_len < 3:
        raise FptError(f"protein max_len must be at least 3 (<cls>, a residue, <sep>), got {max_len}")
    rows = []
    n_truncated = 0
    for sequence in sequences:
        residues = _LETTER_IDS[np.frombuffer(sequence.encode("ascii", "replace"), dtype=np.uint8)]
        if residues.size > max_len - 2:
            n_truncated += 1
            residues = residues[: max_len - 2]
        rows.append(np.concatenate([[CLS_ID], residues, [SEP_ID]]))
    ids, mask = pad_rows(rows, PAD_ID)
    return ids, mask, n_truncated
