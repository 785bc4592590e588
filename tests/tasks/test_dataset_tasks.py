"""Dataset tasks on small files written in the real formats: batches, splits, options, errors."""

import json

import numpy as np
import pytest
import torch
from helpers import homology_records, write_binary_batches, write_mnist

from fpt.cli import main
from fpt.core.errors import FptError
from fpt.data.lra_tsv import write_listops_tsv
from fpt.tasks import create_task
from fpt.tasks.images import shift_and_flip, shift_and_mirror_clothes
from fpt.training.build import build
from fpt.training.config import TrainConfig
from fpt.training.evaluation import evaluate


@pytest.fixture
def mnist_dir(tmp_path):
    images = {
        split: write_mnist(tmp_path / "mnist", split, n, seed=i)
        for i, (split, n) in enumerate([("train", 10), ("test", 7)])
    }
    return tmp_path / "mnist", images


def test_mnist_patches_scaling_and_whole_test_split(mnist_dir):
    folder, images = mnist_dir
    task = create_task("mnist", data_dir=str(folder))
    assert task.spec.seq_len == 49 and task.spec.input_dim == 16 and task.spec.num_classes == 10
    batches = list(task.eval_batches(4))
    assert [len(b) for b in batches] == [4, 3]  # every test image, remainder included
    first = batches[0]
    assert first.x.shape == (4, 49, 16) and first.y.shape == (4, 1)
    test_images, test_labels = images["test"]
    assert torch.allclose(first.x[0, 0], torch.from_numpy(test_images[0, :4, :4].reshape(-1) / 255).float())
    assert torch.allclose(first.x[0, 1], torch.from_numpy(test_images[0, :4, 4:8].reshape(-1) / 255).float())
    assert first.y[:, 0].tolist() == test_labels[:4].tolist()
    assert create_task("mnist", data_dir=str(folder), patch_size=7).spec.seq_len == 16


def test_training_batches_cover_each_epoch_once_and_depend_on_seed_and_step(mnist_dir):
    folder, images = mnist_dir
    task = create_task("mnist", data_dir=str(folder))
    seen = torch.cat([task.train_batch(step, 5, seed=0).x[:, 0, 0] for step in range(2)])
    first_pixels = torch.from_numpy(images["train"][0][:, 0, 0] / 255).float()
    assert sorted(seen.tolist()) == sorted(first_pixels.tolist())  # epoch 0: each image once
    again = create_task("mnist", data_dir=str(folder))
    assert torch.equal(task.train_batch(7, 4, seed=2).x, again.train_batch(7, 4, seed=2).x)
    # another seed, another order (10! orders: the same one by chance is out of the question)
    assert not torch.equal(task.train_batch(0, 10, seed=0).x, task.train_batch(0, 10, seed=1).x)


@pytest.mark.parametrize("name, mirrors", [("mnist", False), ("fashion-mnist", True)])
def test_mnist_like_augmentation_is_off_by_default_and_touches_training_batches_only(mnist_dir, name, mirrors):
    folder, _ = mnist_dir
    plain = create_task(name, data_dir=str(folder))
    augmented = create_task(name, data_dir=str(folder), augment=True)
    assert plain.augment is None and (augmented.augment is shift_and_mirror_clothes) == mirrors
    a, b = augmented.train_batch(0, 8, seed=0), plain.train_batch(0, 8, seed=0)
    assert torch.equal(a.y, b.y) and not torch.equal(a.x, b.x)
    assert torch.equal(a.x, augmented.train_batch(0, 8, seed=0).x)  # the same step, the same shifts
    assert torch.equal(next(augmented.eval_batches(4)).x, next(plain.eval_batches(4)).x)


@pytest.mark.parametrize("flip", [False, True])
def test_shift_and_flip_moves_a_pixel_at_most_padding_and_mirrors_only_when_asked(flip):
    images = torch.zeros(400, 1, 8, 8)
    images[:, 0, 3, 3] = 1.0
    out = shift_and_flip(images, torch.Generator().manual_seed(0), padding=2, flip=flip)
    rows, cols = out[:, 0].sum(2).argmax(1), out[:, 0].sum(1).argmax(1)
    assert torch.equal(out.flatten(1).sum(1), torch.ones(400))  # a 2-pixel shift keeps (3, 3) inside
    assert set(rows.tolist()) == {1, 2, 3, 4, 5}
    shifted_only = {1, 2, 3, 4, 5}  # 3 +- 2; mirrored, column 3 of 8 becomes 4, so 2..6
    assert set(cols.tolist()) == (shifted_only | {6} if flip else shifted_only)


def test_cifar10_augments_training_batches_only(tmp_path):
    write_binary_batches(tmp_path / "cifar-10-batches-bin", n=4)
    task = create_task("cifar10", data_dir=str(tmp_path))
    assert task.spec.seq_len == 64 and task.spec.input_dim == 48
    plain = create_task("cifar10", data_dir=str(tmp_path), augment=False)
    a, b = task.train_batch(0, 8, seed=0), plain.train_batch(0, 8, seed=0)
    assert torch.equal(a.y, b.y) and not torch.allclose(a.x, b.x)
    e1, e2 = next(task.eval_batches(8)), next(plain.eval_batches(8))
    assert torch.equal(e1.x, e2.x)
    # normalised with the paper's CIFAR mean and std
    raw = torch.from_numpy(np.fromfile(tmp_path / "cifar-10-batches-bin" / "test_batch.bin", dtype=np.uint8)[1:3073])
    red = raw[:1024].reshape(32, 32)[0, 0].item() / 255
    assert e1.x[0, 0, 0].item() == pytest.approx((red - 0.4914) / 0.2023, abs=1e-5)


def test_cifar10_lra_protocols(tmp_path):
    write_binary_batches(tmp_path, n=4)  # 20 training and 4 test images
    lra = create_task("cifar10-lra", data_dir=str(tmp_path), protocol="lra")
    assert lra.spec.vocab_size == 256 and lra.spec.seq_len == 1024
    assert lra.eval_splits == ("val", "test") and len(lra.train) == 18 and len(lra.evals["val"]) == 2
    batch = lra.train_batch(0, 3, seed=0)
    assert batch.x.dtype == torch.long and batch.x.shape == (3, 1024) and batch.x.max() < 256
    paper = create_task("cifar10-lra", data_dir=str(tmp_path))
    assert paper.spec.input_dim == 1 and paper.eval_splits == ("test",)
    with pytest.raises(FptError, match="--augment is the paper protocol.s; --protocol lra has none"):
        create_task("cifar10-lra", data_dir=str(tmp_path), protocol="lra", augment=True)
    with pytest.raises(FptError, match="protocol"):
        create_task("cifar10-lra", data_dir=str(tmp_path), protocol="imagenet")


def _write_listops(folder, lengths=(4, 8, 12)):
    sources = {4: "[MAX 2 9 ]", 8: "[MIN 4 [SM 3 5 ] 1 ]", 12: "[MED 1 [MAX 2 [MIN 3 4 ] 5 ] 7 ]"}
    values = {4: 9, 8: 1, 12: 5}
    for split in ("train", "val", "test"):
        write_listops_tsv(folder / f"basic_{split}.tsv", [sources[n] for n in lengths], [values[n] for n in lengths])


def test_listops_from_lra_tsv_keeps_brackets_masks_and_counts_truncation(tmp_path):
    _write_listops(tmp_path)
    task = create_task("listops", data_dir=str(tmp_path))
    assert task.spec.seq_len == 2000 and task.spec.vocab_size == 16 and task.eval_split == "val"
    batch = next(task.eval_batches(8))
    assert batch.x.shape == (3, 12) and batch.mask.sum(1).tolist() == [4, 8, 12]
    assert batch.y[:, 0].tolist() == [9, 1, 5]
    cut = create_task("listops", data_dir=str(tmp_path), max_len=5)
    assert cut.notes["truncated"] == {"train": 2, "val": 2, "test": 2}
    paper = create_task("listops", data_dir=str(tmp_path), protocol="paper")
    assert next(paper.eval_batches(8)).mask.sum(1).tolist() == [3, 6, 9]  # brackets stripped


def test_attention_maps_of_inputs_of_several_lengths_do_not_depend_on_the_batching(tiny_gpt2, tmp_path):
    from fpt.backbones import load_backbone
    from fpt.experiments.plots import mean_attention
    from fpt.models.transformer import FrozenPretrainedTransformer

    _write_listops(tmp_path)
    task = create_task("listops", data_dir=str(tmp_path), max_len=12)
    model = FrozenPretrainedTransformer(load_backbone(tiny_gpt2, seq_len=12), task.spec)
    together, apart = mean_attention(model, task, 0, examples=3), mean_attention(model, task, 0, 3, bytes_budget=1)
    assert together.shape == apart.shape == (12, 12) and torch.allclose(together, apart, atol=1e-6)
    # each real query's weights sum to 1; past an input's end nothing is counted: 3, 2, then 1 of 3 inputs
    assert torch.allclose(apart.sum(1), torch.tensor([1.0] * 4 + [2 / 3] * 4 + [1 / 3] * 4), atol=1e-5)

    # batches of two, the second cut to one input: as wide as what is counted, not as the batch
    _write_listops(tmp_path, lengths=(4, 8, 4, 12))
    task = create_task("listops", data_dir=str(tmp_path), max_len=12)
    config = model.backbone.config
    pairs = 2 * (2 * 4 * config.num_hidden_layers * config.num_attention_heads * 12**2)
    in_pairs, together = mean_attention(model, task, 0, 3, bytes_budget=pairs), mean_attention(model, task, 0, 3)
    assert in_pairs.shape == together.shape == (8, 8) and torch.allclose(in_pairs, together, atol=1e-6)


def test_remote_homology_reports_every_holdout(tmp_path):
    folder = tmp_path / "remote_homology"
    folder.mkdir()
    splits = ("train", "valid", "test_fold_holdout", "test_superfamily_holdout", "test_family_holdout")
    for i, split in enumerate(splits):
        records = homology_records(5, seed=i)
        for r in records:
            r.pop("evolutionary")
        (folder / f"remote_homology_{split}.json").write_text(json.dumps(records))
    task = create_task("remote-homology", data_dir=str(tmp_path), max_len=8)
    assert task.spec.num_classes == 1195 and task.spec.vocab_size == 30
    assert task.eval_splits == splits[1:] and task.eval_split == "valid"
    assert sum(task.notes["truncated"].values()) > 0  # sequences of up to 11 residues, cut to 6


def test_npz_task_with_and_without_a_test_file(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "train.npz", x=rng.normal(size=(20, 6, 3)).astype(np.float32), y=rng.integers(0, 4, 20))
    np.savez(tmp_path / "test.npz", x=rng.normal(size=(5, 6, 3)).astype(np.float32), y=rng.integers(0, 4, 5))
    task = create_task(f"npz:{tmp_path / 'train.npz'}", test_path=str(tmp_path / "test.npz"))
    assert task.spec.input_dim == 3 and task.spec.seq_len == 6 and task.eval_split == "test"
    assert sum(len(b) for b in task.eval_batches(2)) == 5
    held = create_task(f"npz:{tmp_path / 'train.npz'}")
    assert len(held.train) == 18 and len(held.evals["heldout"]) == 2
    np.savez(tmp_path / "tokens.npz", x=rng.integers(0, 7, (5, 6)), y=rng.integers(0, 4, 5))
    with pytest.raises(FptError, match="same kind of rows"):
        create_task(f"npz:{tmp_path / 'train.npz'}", test_path=str(tmp_path / "tokens.npz"))


def test_missing_data_directory_names_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("FPT_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(FptError, match="fpt data get mnist"):
        create_task("mnist")


def test_confusion_matrix_and_per_class_accuracy(mnist_dir, tiny_gpt2):
    folder, images = mnist_dir
    config = TrainConfig(task="mnist", task_options={"data_dir": str(folder)}, backbone=tiny_gpt2)
    task, model = build(config)
    result = evaluate(model, task, batch_size=3, confusion=True)
    matrix = np.array(result["confusion"])
    assert matrix.shape == (10, 10) and matrix.sum() == 7
    assert np.array_equal(matrix.sum(1), np.bincount(images["test"][1], minlength=10))
    assert result["accuracy"] == pytest.approx(np.trace(matrix) / 7)


def test_train_and_evaluate_mnist_through_the_cli(mnist_dir, tiny_gpt2, tmp_path, capsys):
    folder, _ = mnist_dir
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "mnist",
                "--data-dir",
                str(folder),
                "--backbone",
                tiny_gpt2,
                "--steps",
                "4",
                "--eval-every",
                "2",
                "--batch-size",
                "4",
                "--out",
                str(run),
                "--no-progress",
            ]
        )
        == 0
    )
    assert main(["evaluate", str(run)]) == 0
    evaluation = json.loads((run / "evaluation.json").read_text())["splits"]["test"]
    assert evaluation["examples"] == 7 and len(evaluation["per_class_accuracy"]) == 10
    assert (run / "confusion_test.png").read_bytes()[:4] == b"\x89PNG"


# 262,143: the largest id a task may declare (TaskSpec's bound; larger ones are refused, see
# tests/cli/test_reliability_outputs.py)
@pytest.mark.parametrize("largest", [255, 256, 32767, 32768, 50256, 65535, 65536, 262_143])
def test_npz_token_ids_keep_their_value_whatever_their_size(tmp_path, largest):
    # ids of 32768-65535 used to wrap negative in int16, and ids of 65536 and more to small valid ids
    x = np.array([[0, 1, largest], [largest, 2, 3], [4, largest - 1, 5], [6, 7, 8]])
    np.savez(tmp_path / "ids.npz", x=x, y=np.array([0, 1, 0, 1]))
    task = create_task(f"npz:{tmp_path / 'ids.npz'}", test_path=str(tmp_path / "ids.npz"))
    assert torch.equal(task.train.x.long(), torch.from_numpy(x))
    assert task.spec.vocab_size == largest + 1
    assert torch.equal(next(task.eval_batches(4)).x, torch.from_numpy(x))


def test_npz_features_beyond_float32_are_refused_not_turned_into_inf(tmp_path):
    np.savez(tmp_path / "big.npz", x=np.full((4, 2, 3), 1e300), y=np.array([0, 1, 0, 1]))
    with pytest.raises(FptError, match="beyond float32"):
        create_task(f"npz:{tmp_path / 'big.npz'}", heldout_fraction=0.5)
    np.savez(tmp_path / "nan.npz", x=np.full((4, 2, 3), np.nan), y=np.array([0, 1, 0, 1]))
    with pytest.raises(FptError, match="NaN"):
        create_task(f"npz:{tmp_path / 'nan.npz'}", heldout_fraction=0.5)
