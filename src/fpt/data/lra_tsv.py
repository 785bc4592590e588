"""Long Range Arena ListOps TSV files and their tokenizer.

A file (``basic_train.tsv``, ``basic_val.tsv``, ``basic_test.tsv`` in LRA's
``listops-1000`` folder) has a header ``Source<TAB>Target`` and one expression a row:
``( ( ( [MAX 2 ) 9 ) ] )<TAB>9``. The parentheses come from how LRA prints its trees and
carry no information: the operators, digits and closing brackets do.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from fpt.core.errors import FptError
from fpt.core.paths import atomic_write
from fpt.data import pad_rows

HEADER = ["Source", "Target"]
SPLITS = ("train", "val", "test")
OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
CLOSE = "]"
# Fixed vocabulary: id 0 pads, the rest in this order on every run (the official FPT code
# built it from a Python set, so ids depended on the hash seed).
VOCAB: tuple[str, ...] = ("<pad>", *(str(d) for d in range(10)), *OPERATORS, CLOSE)
TOKEN_IDS: dict[str, int] = {token: i for i, token in enumerate(VOCAB)}
PAD_ID = 0
PROTOCOL_MAX_LEN = {"lra": 2000, "paper": 512}
_LABELS = frozenset(str(d) for d in range(10))


def read_listops_tsv(path: str | Path) -> tuple[list[str], np.ndarray]:
    """Read an LRA ListOps TSV file into source strings and int64 labels (0..9)."""
    path = Path(path)
    sources: list[str] = []
    labels: list[int] = []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            rows = csv.reader(f, delimiter="\t")
            header = next(rows, None)
            if header != HEADER:
                raise FptError(f"{path}: expected the header 'Source<TAB>Target', found {header!r}")
            for line, row in enumerate(rows, start=2):
                if not row:  # a blank line, e.g. at the end of a hand-edited file
                    continue
                if len(row) != 2 or row[1] not in _LABELS:
                    raise FptError(
                        f"{path}, line {line}: expected '<expression><TAB><label 0-9>', "
                        f"found {len(row)} field(s) ending {row[-1][-12:]!r}"
                    )
                if not row[0].replace("(", "").replace(")", "").strip():  # nothing to read: a row of padding
                    raise FptError(f"{path}, line {line}: an empty expression; every row needs one")
                sources.append(row[0])
                labels.append(int(row[1]))
    except FileNotFoundError:
        raise FptError(f"{path}: no such ListOps TSV file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise FptError(f"{path}: unreadable ListOps TSV file ({e})") from None
    return sources, np.asarray(labels, dtype=np.int64)


def write_listops_tsv(path: str | Path, sources: Sequence[str], labels: Iterable[int]) -> None:
    """Write sources and labels as an LRA TSV file, atomically (a temp file, then rename)."""

    def write(tmp: Path) -> None:
        with open(tmp, "x", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, delimiter="\t", lineterminator="\n")
            writer.writerow(HEADER)
            writer.writerows(zip(sources, (int(y) for y in labels), strict=True))

    atomic_write(path, write)


def load_listops_dir(directory: str | Path, split: str, task: str = "basic") -> tuple[list[str], np.ndarray]:
    """Read ``{task}_{split}.tsv`` from ``directory`` (or its ``listops-1000`` folder)."""
    if split not in SPLITS:
        raise FptError(f"unknown ListOps split {split!r}: expected one of {', '.join(SPLITS)}")
    directory = Path(directory)
    for candidate in (directory / f"{task}_{split}.tsv", directory / "listops-1000" / f"{task}_{split}.tsv"):
        if candidate.is_file():
            return read_listops_tsv(candidate)
    raise FptError(
        f"no ListOps file {task}_{split}.tsv in {directory}: put LRA's listops-1000 files there "
        "(lra_release.gz) or let fpt generate them"
    )


def _char_codes() -> np.ndarray:
    """Byte -> token id for one-character tokens and operator marks, -2 for separators, -1 else."""
    codes = np.full(256, -1, dtype=np.int64)
    for token, i in TOKEN_IDS.items():
        if token in _OP_MARKS:
            codes[ord(_OP_MARKS[token])] = i
        elif len(token) == 1:
            codes[ord(token)] = i
    for separator in " \t\n\r\x0b\x0c()":
        codes[ord(separator)] = -2
    return codes


# Each operator becomes one control character, so a source maps to ids byte by byte in numpy
# (about twice as fast as splitting into words; 96k LRA sources take ~8 s on 2 cores).
_OP_MARKS = {op: chr(1 + i) for i, op in enumerate(OPERATORS)}
_CHAR_CODES = _char_codes()


def _source_ids(source: str) -> np.ndarray | None:
    """Token ids of one source, or None if it holds anything outside the vocabulary."""
    if any(mark in source for mark in _OP_MARKS.values()):
        return None
    for op, mark in _OP_MARKS.items():
        source = source.replace(op, mark)
    codes = _CHAR_CODES[np.frombuffer(source.encode("ascii", "replace"), dtype=np.uint8)]
    is_token = codes != -2
    # Every token is one byte now: two in a row ("12", "[MINX") are not vocabulary tokens.
    if (codes == -1).any() or (is_token[1:] & is_token[:-1]).any():
        return None
    return codes[is_token]


def _first_unknown_token(source: str) -> str:
    for token in source.replace("(", " ").replace(")", " ").split():
        if token not in TOKEN_IDS:
            return token
    return source[:20]


def tokenize_listops(
    sources: Sequence[str], max_len: int | None = None, protocol: str = "lra"
) -> tuple[np.ndarray, np.ndarray, int]:
    """Turn ListOps sources into token ids with the fixed vocabulary :data:`VOCAB`.

    ``protocol="lra"``: operators, digits and ``]`` (parentheses dropped, as LRA's input
    pipeline does), at most ``max_len`` tokens (default 2000). ``protocol="paper"``: the
    official FPT code's input, operators and digits only, at most 512 tokens by default;
    without the closing brackets the value is ambiguous, so the task is not solvable.

    Returns ids int64 (N, width) padded with 0, mask bool (N, width) true on real tokens,
    and how many sequences were cut to ``max_len`` (cut, never dropped). ``width`` is the
    longest sequence after cutting.
    """
    if protocol not in PROTOCOL_MAX_LEN:
        raise FptError(f"unknown ListOps protocol {protocol!r}: expected 'lra' or 'paper'")
    max_len = PROTOCOL_MAX_LEN[protocol] if max_len is None else max_len
    if max_len < 1:
        raise FptError(f"ListOps max_len must be at least 1, got {max_len}")
    encoded: list[np.ndarray] = []
    n_truncated = 0
    for i, source in enumerate(sources):
        ids = _source_ids(source)
        if ids is None:
            raise FptError(
                f"ListOps example {i}: unknown token {_first_unknown_token(source)!r}; expected "
                f"{' '.join(OPERATORS)}, digits 0-9, '{CLOSE}' and parentheses, space-separated"
            )
        if protocol == "paper":
            ids = ids[ids != TOKEN_IDS[CLOSE]]
        if ids.size > max_len:
            n_truncated += 1
            ids = ids[:max_len]
        encoded.append(ids)
    ids, mask = pad_rows(encoded, PAD_ID)
    return ids, mask, n_truncated
