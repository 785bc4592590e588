"""`fpt predict` and `load_run(...).predict`: new inputs in the task's own formats, in input order."""

import json

import numpy as np
import pytest
import torch
from helpers import write_mnist

from fpt.cli import main
from fpt.data.lra_tsv import write_listops_tsv
from fpt.training.evaluation import evaluate
from fpt.training.lifecycle import load_run


@pytest.fixture
def mnist_run(tiny_gpt2, tmp_path):
    data = tmp_path / "mnist"
    write_mnist(data, "train", 20, seed=1)
    write_mnist(data, "test", 12, seed=2)
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "mnist",
                "--data-dir",
                str(data),
                "--backbone",
                tiny_gpt2,
                "--steps",
                "2",
                "--batch-size",
                "4",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out, data


def test_predictions_on_idx_images_match_the_evaluation_of_the_same_images(mnist_run, capsys):
    out, data = mnist_run
    images = data / "t10k-images-idx3-ubyte"
    assert main(["predict", str(out), "--input", str(images), "--out", str(out / "p.csv")]) == 0
    printed = capsys.readouterr().out
    lines = (out / "p.csv").read_text().splitlines()
    assert lines[0].startswith("index,predicted,p0") and len(lines) == 13
    config, task, model, _ = run = load_run(out)
    reference = evaluate(model, task, 256)  # the same 12 test images, with their labels beside them
    assert f"accuracy {reference['accuracy']:.4f}" in printed
    probabilities = run.predict(task.evals["test"].x.numpy())
    predicted = [int(line.split(",")[1]) for line in lines[1:]]
    assert predicted == probabilities.argmax(-1)[:, 0].tolist()
    assert torch.allclose(probabilities.sum(-1), torch.ones(12, 1), atol=1e-5)


def test_npz_inputs_without_labels_and_other_output_formats(mnist_run, capsys):
    out, _ = mnist_run
    images = np.random.default_rng(0).integers(0, 256, (5, 28, 28), dtype=np.uint8)
    np.savez(out / "new.npz", x=images)
    assert main(["predict", str(out), "--input", str(out / "new.npz"), "--out", str(out / "p.jsonl")]) == 0
    records = [json.loads(line) for line in (out / "p.jsonl").read_text().splitlines()]
    assert [r["index"] for r in records] == list(range(5)) and "accuracy" not in capsys.readouterr().out
    assert main(["predict", str(out), "--input", str(out / "new.npz"), "--out", str(out / "p.npy")]) == 0
    assert np.load(out / "p.npy").shape == (5, 1, 10)


@pytest.mark.parametrize(
    "arrays, words",
    [
        (dict(x=np.zeros((3, 32, 32), dtype=np.uint8)), "rows of shape (32, 32)"),
        (dict(x=np.full((3, 28, 28), 0.5)), "integers 0..255"),
        (dict(x=np.zeros((3, 28, 28), dtype=np.uint8), y=np.array([0, 1, 12])), "labels y must be"),
    ],
)
def test_inputs_that_do_not_fit_the_run_are_one_line(mnist_run, capsys, arrays, words):
    out, _ = mnist_run
    np.savez(out / "bad.npz", **arrays)
    assert main(["predict", str(out), "--input", str(out / "bad.npz"), "--out", str(out / "q.csv")]) == 2
    err = capsys.readouterr().err
    assert words in err and "\n" not in err.strip() and not (out / "q.csv").exists()


def test_a_listops_tsv_for_an_image_run_and_a_bad_out_are_refused(mnist_run, capsys, tmp_path):
    out, _ = mnist_run
    write_listops_tsv(tmp_path / "x.tsv", ["[MAX 1 2 ]"], [2])
    for argv, words in (
        (["--input", str(tmp_path / "x.tsv")], "not a format the mnist task reads"),
        (["--input", str(tmp_path / "x.tsv"), "--out", str(tmp_path / "p.txt")], "write predictions as"),
    ):
        assert main(["predict", str(out), *argv]) == 2
        assert words in capsys.readouterr().err


def test_token_ids_beyond_the_runs_vocabulary_are_refused(tiny_gpt2, tmp_path, capsys):
    rng = np.random.default_rng(0)
    np.savez(
        tmp_path / "seq.npz",
        x=rng.integers(1, 6, (12, 8)),
        y=np.arange(12) % 2,
        mask=np.arange(8)[None] < rng.integers(2, 9, (12, 1)),
    )
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                f"npz:{tmp_path / 'seq.npz'}",
                "--backbone",
                tiny_gpt2,
                "--steps",
                "1",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    for big in (99, 300):  # ids are stored as uint8 like pixels, but are not checked as pixels
        np.savez(tmp_path / "new.npz", x=np.array([[1, 2, big]]), mask=np.array([[True, True, True]]))
        assert main(["predict", str(out), "--input", str(tmp_path / "new.npz"), "--out", str(tmp_path / "p.csv")]) == 2
        assert "token ids must be integers in 0..5" in capsys.readouterr().err
    np.savez(tmp_path / "ok.npz", x=np.array([[1, 2, 3, 0]]), mask=np.array([[True, True, True, False]]))
    assert main(["predict", str(out), "--input", str(tmp_path / "ok.npz"), "--out", str(tmp_path / "p.csv")]) == 0
    run = load_run(out)
    alone = run.predict(np.array([[1, 2, 3]]))  # the padded row gives what the unpadded one gives
    assert torch.allclose(alone, run.predict(np.array([[1, 2, 3, 0]]), mask=np.array([[1, 1, 1, 0]])), atol=1e-5)


def test_runs_trained_with_bucketing_predict_too_and_bad_token_rows_are_refused(tiny_gpt2, tmp_path, capsys):
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, 9, 16)
    mask = np.arange(8)[None] < lengths[:, None]
    np.savez(tmp_path / "seq.npz", x=np.where(mask, rng.integers(1, 6, (16, 8)), 0), y=np.arange(16) % 2, mask=mask)
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                f"npz:{tmp_path / 'seq.npz'}",
                "--backbone",
                tiny_gpt2,
                "--steps",
                "2",
                "--batch-size",
                "4",
                "--bucket-window",
                "2",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "predict",
                str(out),
                "--input",
                str(tmp_path / "seq.npz"),
                "--out",
                str(tmp_path / "p.csv"),
                "--batch-size",
                "3",
            ]
        )
        == 0
    )
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 17
    assert load_run(out).predict(np.array([[1, 2, 3]])).shape == (1, 1, 2)
    for name, arrays, words in (
        ("flat", dict(x=np.array([1, 2, 3])), "axes"),
        ("left", dict(x=np.array([[0, 1, 2]]), mask=np.array([[False, True, True]])), "right-padded"),
        ("text", dict(x=np.array([[1, 2]]), y=np.array(["a"])), "labels y must be integers"),
    ):
        np.savez(tmp_path / f"{name}.npz", **arrays)
        assert (
            main(["predict", str(out), "--input", str(tmp_path / f"{name}.npz"), "--out", str(tmp_path / "q.csv")]) == 2
        )
        assert words in capsys.readouterr().err


def test_read_only_commands_need_a_checkpoint(tiny_gpt2, tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--backbone",
                tiny_gpt2,
                "--n-bits",
                "4",
                "--eval-size",
                "8",
                "--steps",
                "1",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    (out / "checkpoint.safetensors").unlink()
    assert main(["evaluate", str(out)]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_a_config_written_before_devices_existed_resumes_on_the_cpu():
    from fpt.training.config import TrainConfig

    assert TrainConfig.from_dict({"task": "bit-xor"}).device == "cpu"
    assert TrainConfig().device == "auto"


def test_a_bit_xor_run_predicts_rows_of_bits_and_refuses_other_rows(tiny_gpt2, tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "bit-xor",
                "--n-bits",
                "4",
                "--eval-size",
                "8",
                "--backbone",
                tiny_gpt2,
                "--steps",
                "1",
                "--batch-size",
                "4",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    bits = np.random.default_rng(0).integers(0, 2, (5, 8))
    np.savez(tmp_path / "bits.npz", x=bits)
    assert main(["predict", str(out), "--input", str(tmp_path / "bits.npz"), "--out", str(tmp_path / "p.npy")]) == 0
    assert np.load(tmp_path / "p.npy").shape == (5, 4, 2)  # one answer per bit of the XOR
    for x, words in (
        (np.array(5), "no examples"),
        (bits * 2, "token ids must be integers in 0..1"),
        (np.zeros((5, 0), int), "empty rows"),
        (bits[..., None], "3 axes"),
        (bits[:, :6], "takes (N, 8)"),
    ):
        np.savez(tmp_path / "bad.npz", x=x)
        assert main(["predict", str(out), "--input", str(tmp_path / "bad.npz"), "--out", str(tmp_path / "q.npy")]) == 2
        err = capsys.readouterr().err
        assert words in err and "\n" not in err.strip() and not (tmp_path / "q.npy").exists()
