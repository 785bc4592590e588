"""The `results-index` table of benchmarks/results-index.md: each entry at the top of benchmarks/results/
that git tracks, with its tracked files, their size on disk, its checkpoints, and the tables that quote it.

Which tables quote a folder is recorded, not declared: every other table is rendered once more while
every file it opens is noted (the table modules build their paths from run names, globs and the rows
of results.csv files, and the controls tables read through fpt.experiments.controls, so no list in
them says what they read). A table quotes an entry when it opens a file under it; a file a table
only looks for (exists(), glob()) and does not open does not count.

The size budget of benchmarks/results/ (CONTRIBUTING.md states it) is here too, with the one list of
checkpoints that may be committed: tests/test_readme_tables.py checks the tracked files against both.
"""

from __future__ import annotations

import builtins
import io
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from . import common
from .common import _markdown

CHECKPOINT = ".safetensors"
# The budget of the files git tracks under benchmarks/results/. Measured when it was set (2026-11-28):
# 96,092,640 bytes in 1,994 files, 92,005,528 of those bytes in the 31 checkpoints below; the rest,
# 4.1 MB of small files, may about double before the budget is reached. Raising it is a change of its own:
# the files' count went from 2,500 to 3,000 (2026-11-28, at 2,528 files in 97,062,946 bytes), since three
# small files a run (about 6 kB) reach a count of 2,500 while 2.9 MB of the bytes are left; 3,000 files
# bring the two budgets to about the same point.
BUDGET_BYTES = 100_000_000
BUDGET_FILES = 3_000
# The checkpoints committed before the rule that none is unless a quoted figure is re-scored from it
# (`fpt evaluate RUN`): the converged runs' weights, each resumable with `fpt train --resume`. A new
# one goes here only with the figure re-scored from it named in its commit.
CHECKPOINTS = tuple(
    f"converge/{run}/checkpoint.safetensors"
    for run in (
        "bit-memory-fpt-fast-dropout0-eval100-seed0",
        "bit-memory-fpt-fast-dropout0-eval100-seed1",
        "bit-memory-fpt-fast-dropout0-eval100-seed2",
        "bit-memory-fpt-fast-eval100-seed0",
        "bit-memory-fpt-fast-seed0",
        "bit-memory-fpt-paper-seed0",
        "fashion-mnist-fpt-fast-dropout0-seed0",
        "fashion-mnist-fpt-fast-seed0",
        "fashion-mnist-fpt-fast16k-dropout0-augment-val5k-seed0",
        "fashion-mnist-fpt-fast16k-dropout0-mean-val5k-seed0",
        "fashion-mnist-fpt-fast16k-dropout0-seed0",
        "fashion-mnist-fpt-fast16k-dropout0-val5k-seed0",
        "fashion-mnist-fpt-fast16k-dropout0-val5k-seed1",
        "fashion-mnist-fpt-fast16k-dropout0-val5k-seed2",
        "fashion-mnist-fpt-fast32k-dropout0-val5k-seed0",
        "fashion-mnist-random-fast-dropout0-seed0",
        "fashion-mnist-random-fast-seed0",
        "fashion-mnist-random-fast16k-dropout0-seed0",
        "listops-fpt-fast-paper-protocol-seed0",
        "listops-fpt-fast-seed0",
        "mnist-bit-fast4k-seed0",
        "mnist-fpt-fast-seed0",
        "mnist-fpt-fast16k-dropout0-seed0",
        "mnist-fpt-fast16k-dropout0-seed1",
        "mnist-fpt-fast16k-dropout0-seed2",
        "mnist-fpt-fast16k-seed0",
        "mnist-fpt-fast4k-seed0",
        "mnist-fpt-paper-seed0",
        "mnist-random-fast-seed0",
        "mnist-random-fast16k-dropout0-seed0",
        "mnist-random-paper-seed0",
    )
)


def tracked_files(results: Path) -> dict[str, int]:
    """{path under `results`, as git names it: its size on disk in bytes} for every file git tracks there."""
    try:
        listing = subprocess.run(["git", "ls-files", "-z", "--", "."], cwd=results, capture_output=True)
    except OSError as error:  # no git on this machine
        raise SystemExit(f"the results index lists the files git tracks, and git cannot run here: {error}")
    if listing.returncode != 0:
        raise SystemExit(f"the results index lists the files git tracks: {results} is not in a git checkout")
    names = [name for name in listing.stdout.decode().split("\0") if name]
    return {name: (results / name).stat().st_size for name in names if (results / name).is_file()}


@contextmanager
def files_opened(under: Path) -> Iterator[set[str]]:
    """Note the files under `under` that are opened inside the block (by builtins.open, io.open or a
    Path's open, read_text and read_bytes, which call io.open), as paths relative to it; an open that
    fails (a file looked for and not there) is not noted."""
    root, seen, original = under.resolve(), set(), builtins.open

    def recording(file, *args, **kwargs):
        handle = original(file, *args, **kwargs)  # first: a file looked for and not there is not read
        if isinstance(file, (str, bytes, os.PathLike)):
            path = Path(os.fsdecode(file)).resolve()
            if path.is_relative_to(root):
                seen.add(path.relative_to(root).as_posix())
        return handle

    builtins.open = io.open = recording
    try:
        yield seen
    finally:
        builtins.open = io.open = original


def files_read(tables: dict[str, Callable[[], str]], results: Path) -> dict[str, set[str]]:
    """{table: the files under `results` it opens while it is rendered}."""
    read = {}
    for name, table in tables.items():
        with files_opened(results) as seen:
            table()
        read[name] = seen
    return read


def entry(path: str) -> str:
    """The entry at the top of results/ that holds `path`: its folder (with a trailing /) or the file itself."""
    top, _, rest = path.partition("/")
    return f"{top}/" if rest else top


def _kb(size: int) -> str:
    return f"{size / 1e3:,.1f} kB"


def _checkpoints(files: dict[str, int]) -> str:
    sizes = [size for name, size in files.items() if name.endswith(CHECKPOINT)]
    return f"{len(sizes)} ({_kb(sum(sizes))})" if sizes else "-"


def _quoted_by(tables: list[str], homes: dict[str, str]) -> str:
    """The tables, grouped by the page they live in: a link to each benchmarks page, the front page by name."""
    pages: dict[str, list[str]] = {}
    for name in tables:
        pages.setdefault(homes[name], []).append(f"`{name}`")
    parts = []
    for home, names in pages.items():
        page = home.removeprefix("benchmarks/")
        where = f"[{page}]({page})" if page != home else home
        parts.append(f"{where}: {', '.join(names)}")
    return "; ".join(parts) or "none"


def results_index_table(tables: dict[str, Callable[[], str]], homes: dict[str, str]) -> str:
    results = common.RESULTS
    files = tracked_files(results)
    read = files_read(tables, results)
    entries: dict[str, dict[str, int]] = {}
    for name, size in files.items():
        entries.setdefault(entry(name), {})[name] = size
    rows = []
    for top in sorted(entries):
        held = entries[top]
        quoting = [name for name, paths in read.items() if any(entry(path) == top for path in paths)]
        reads = {path for paths in read.values() for path in paths if path in held}
        rows.append(
            [f"`{top}`", f"{len(held):,}", _kb(sum(held.values())), _checkpoints(held)]
            + [f"{len(reads):,} of {len(held):,}", _quoted_by(quoting, homes)]
        )
    every_read = {path for paths in read.values() for path in paths}
    rows.append(
        ["**all**", f"{len(files):,}", _kb(sum(files.values())), _checkpoints(files)]
        + [f"{len(every_read & files.keys()):,} of {len(files):,}", f"{len(read)} tables"]
    )
    header = ["entry of benchmarks/results/", "tracked files", "their size on disk", "checkpoints (size)"]
    text = _markdown(header + ["files a table opens", "tables that quote it, by page"], rows)
    text += "\n\n" + budget_line(files)
    silent = [f"`{name}`" for name, paths in read.items() if not paths]
    if silent:
        text += "\n\nTables that opened no file under benchmarks/results/: " + ", ".join(silent) + "."
    untracked = sorted(every_read - files.keys())
    if untracked:
        text += "\n\nFiles the tables open that git does not track: " + ", ".join(f"`{p}`" for p in untracked) + "."
    return text


def _largest(files: dict[str, int], measure: Callable[[dict[str, int]], int], unit: Callable[[int], str]) -> str:
    entries: dict[str, dict[str, int]] = {}
    for name, size in files.items():
        entries.setdefault(entry(name), {})[name] = size
    ranked = sorted(entries.items(), key=lambda item: -measure(item[1]))[:5]
    return ", ".join(f"{top} {unit(measure(held))}" for top, held in ranked)


def budget_problems(files: dict[str, int]) -> list[str]:
    """What in `files` ({path under benchmarks/results: bytes}, the tracked ones) breaks the budget or
    the checkpoint rule, one line each; empty when nothing does."""
    problems = []
    total = sum(files.values())
    if total > BUDGET_BYTES:
        largest = _largest(files, lambda held: sum(held.values()), _kb)
        problems.append(
            f"benchmarks/results tracks {total:,} bytes, over its budget of {BUDGET_BYTES:,} (CONTRIBUTING.md); "
            f"the largest entries: {largest}"
        )
    if len(files) > BUDGET_FILES:
        most = _largest(files, len, lambda count: f"{count:,} file{'s' if count != 1 else ''}")
        problems.append(
            f"benchmarks/results tracks {len(files):,} files, over its budget of {BUDGET_FILES:,} (CONTRIBUTING.md); "
            f"the most in: {most}"
        )
    problems += [
        f"benchmarks/results/{name}: a checkpoint not in CHECKPOINTS (benchmarks/tablegen/results_index.py): "
        "commit one only when a figure the pages quote is re-scored from it, and list it there; else git rm --cached it"
        for name in sorted(files)
        if name.endswith(CHECKPOINT) and name not in CHECKPOINTS
    ]
    return problems


def budget_line(files: dict[str, int]) -> str:
    """The budget and how much of it the tracked files use, for the index's page."""
    total = sum(files.values())
    return (
        f"The budget (CONTRIBUTING.md): {_kb(BUDGET_BYTES)} and {BUDGET_FILES:,} tracked files, of which "
        f"{100 * total / BUDGET_BYTES:.1f}% and {100 * len(files) / BUDGET_FILES:.1f}% are used; checkpoints: "
        f"only the {len(CHECKPOINTS)} listed in tablegen/results_index.py (CHECKPOINTS)."
    )
