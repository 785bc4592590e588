"""`fpt export`: a run as a PEFT layer-norm-tuning adapter or a Hugging Face-style directory, each
giving the run's own logits again; `fpt predict` on an exported directory."""

import json
import shutil
import sys

import numpy as np
import pytest
import torch
from helpers import raises_naming, write_mnist

from fpt.cli import main
from fpt.models.transformer import FrozenPretrainedTransformer
from fpt.serve.export import compose_peft, export_run
from fpt.training.lifecycle import load_run

BIT_XOR = ["--task", "bit-xor", "--n-bits", "4", "--eval-size", "8"]


def _train(backbone, out, *extra):
    # a large lr, so that the trained norms and positions are far from the published ones
    assert (
        main(
            [
                "train",
                *BIT_XOR,
                "--backbone",
                backbone,
                "--steps",
                "3",
                "--eval-every",
                "3",
                "--lr",
                "0.05",
                "--no-progress",
                "--out",
                str(out),
                *extra,
            ]
        )
        == 0
    )
    return out


@torch.no_grad()
def _logits_of_run(run):
    _, task, model, _ = load_run(run, device="cpu")
    batch = next(task.eval_batches(8))
    return batch, model.eval()(batch.x, batch.mask)


def _nothing_left_beside(path):
    return not path.exists() and not list(path.parent.glob(f".{path.name}.*"))


@pytest.mark.filterwarnings("ignore:Unsupported layer type", "ignore:`is_gradient_checkpointing`")  # peft's own
@pytest.mark.parametrize(
    "family, extra", [("bert", []), ("gpt2", ["--precision", "bf16"]), ("llama", ["--extra-positions"])]
)
def test_a_peft_adapter_on_the_base_model_gives_the_runs_logits(tiny_backbones, tmp_path, family, extra):
    from peft import PeftModel
    from transformers import AutoModel

    run = _train(tiny_backbones[family], tmp_path / "run", *extra)
    out = tmp_path / "peft"
    assert main(["export", str(run), "--format", "peft", "--out", str(out)]) == 0
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["peft_type"] == "LN_TUNING" and adapter["target_modules"]
    if family == "bert":  # positions and BERT's token-type table (fpt's input group) travel as modules_to_save
        assert set(adapter["modules_to_save"]) == {"embeddings.position_embeddings", "embeddings.token_type_embeddings"}

    batch, expected = _logits_of_run(run)
    body = PeftModel.from_pretrained(AutoModel.from_pretrained(tiny_backbones[family]), out)
    with torch.no_grad():
        torch.testing.assert_close(compose_peft(body, out)(batch.x, batch.mask), expected, atol=1e-5, rtol=0)
        # the adapter carries what was trained: without it the base model's own norms give other logits
        plain = compose_peft(AutoModel.from_pretrained(tiny_backbones[family]), out)(batch.x, batch.mask)
    assert (plain - expected).abs().max() > 1e-3


@pytest.mark.parametrize(
    "extra, why",
    [
        (["--layers", "1"], "first 1 blocks (--layers)"),
        (["--n-bits", "70"], "grew the position table from 128 to 140 rows"),  # 140 tokens, the table holds 128
        (["--init", "random"], "--init random"),
    ],
)
def test_runs_an_adapter_cannot_express_are_refused_and_export_whole_instead(tiny_gpt2, tmp_path, capsys, extra, why):
    run = _train(tiny_gpt2, tmp_path / "run", *extra)
    trained = capsys.readouterr().err
    # a task longer than the pretrained positions is said when training starts, and only then
    grown = "the task's 140 tokens exceed the 128 positions" in trained and "interpolated, not pretrained" in trained
    assert grown == ("--n-bits" in extra), trained
    assert main(["export", str(run), "--format", "peft", "--out", str(tmp_path / "peft")]) == 2
    error = capsys.readouterr().err
    assert why in error and "use --format hf" in error and error.count("\n") == 1
    assert _nothing_left_beside(tmp_path / "peft")

    assert main(["export", str(run), "--format", "hf", "--out", str(tmp_path / "hf")]) == 0
    batch, expected = _logits_of_run(run)
    with torch.no_grad():
        assert torch.equal(FrozenPretrainedTransformer.from_pretrained(tmp_path / "hf")(batch.x, batch.mask), expected)


def test_an_hf_export_rebuilds_offline_without_the_run_and_predicts_as_the_run(tiny_gpt2, tmp_path):
    data = tmp_path / "mnist"
    write_mnist(data, "train", 20, seed=1)
    images, _ = write_mnist(data, "test", 12, seed=2)
    run = tmp_path / "run"
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
                "--lr",
                "0.05",
                "--no-progress",
                "--out",
                str(run),
            ]
        )
        == 0
    )
    np.savez(tmp_path / "new.npz", x=images)
    assert main(["predict", str(run), "--input", str(tmp_path / "new.npz"), "--out", str(tmp_path / "run.npy")]) == 0
    batch, expected = _logits_of_run(run)

    out = tmp_path / "hf"
    out.mkdir()  # an empty folder is fine
    assert main(["export", str(run), "--format", "hf", "--out", str(out)]) == 0
    assert {p.suffix for p in out.iterdir()} == {".json", ".safetensors"}  # nothing pickled
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["fpt"]["task"] == "mnist" and config["fpt"]["policy"] == "fpt"
    shutil.rmtree(run)  # the export stands alone
    rng = torch.get_rng_state()
    model = FrozenPretrainedTransformer.from_pretrained(out)
    assert torch.equal(torch.get_rng_state(), rng) and not model.training
    with torch.no_grad():
        assert torch.equal(model(batch.x, batch.mask), expected)

    assert main(["predict", str(out), "--input", str(tmp_path / "new.npz"), "--out", str(tmp_path / "hf.npy")]) == 0
    assert np.array_equal(np.load(tmp_path / "hf.npy"), np.load(tmp_path / "run.npy"))


@pytest.fixture
def gpt2_run(tiny_gpt2, tmp_path):
    return _train(tiny_gpt2, tmp_path / "run")


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda tmp, run: ["nothing", "hf", "out"], ["does not exist"]),
        (lambda tmp, run: [run, "onnx", "out"], ["unknown --format 'onnx'", "peft, hf"]),
        (
            lambda tmp, run: [run, "hf", (tmp / "full").mkdir() or (tmp / "full" / "a").touch() or "full"],
            ["exists and is not an empty folder"],
        ),
        (lambda tmp, run: [run, "hf", (tmp / "file").touch() or "file"], ["exists and is not an empty folder"]),
    ],
)
def test_bad_exports_are_one_line_and_write_nothing(gpt2_run, tmp_path, capsys, make, words):
    source, fmt, out = make(tmp_path, gpt2_run)
    before = sorted(tmp_path.iterdir())
    capsys.readouterr()
    assert main(["export", str(tmp_path / source), "--format", fmt, "--out", str(tmp_path / out)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and all(w in error for w in words), error
    assert sorted(tmp_path.iterdir()) == before


def test_a_baseline_run_has_no_backbone_to_export(tmp_path):
    run = tmp_path / "lstm"
    assert main(["train", *BIT_XOR, "--model", "lstm", "--steps", "1", "--no-progress", "--out", str(run)]) == 0
    raises_naming(lambda: export_run(run, "hf", tmp_path / "out"), "lstm baseline", "no pretrained backbone")
    assert _nothing_left_beside(tmp_path / "out")


def test_a_failure_while_writing_leaves_nothing(gpt2_run, tmp_path, monkeypatch, capsys):
    def fail(model, directory, extra=None):
        (directory / "config.json").write_text("{}")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(FrozenPretrainedTransformer, "save_pretrained", fail)
    assert main(["export", str(gpt2_run), "--format", "hf", "--out", str(tmp_path / "out")]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert _nothing_left_beside(tmp_path / "out")


def test_without_peft_the_fix_is_named(gpt2_run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # import peft now fails
    raises_naming(lambda: export_run(gpt2_run, "peft", tmp_path / "out"), "pip install 'fpt[peft]'")
    assert _nothing_left_beside(tmp_path / "out")


def test_what_is_not_an_export_is_refused_in_one_line(gpt2_run, tmp_path):
    raises_naming(lambda: FrozenPretrainedTransformer.from_pretrained(gpt2_run), "fpt export")
    raises_naming(lambda: compose_peft(torch.nn.Identity(), gpt2_run), "fpt_task.json", "--format peft")
    assert export_run(gpt2_run, "hf", tmp_path / "hf") == tmp_path / "hf"
    config_path = tmp_path / "hf" / "config.json"
    good = json.loads(config_path.read_text())
    for damage, words in (
        ({"n_embd": "32"}, "cannot rebuild backbone"),
        ({"n_inner": -1}, "cannot rebuild backbone"),
        ({"fpt": {**good["fpt"], "policy": 5}}, "fpt settings damaged"),
        ({"fpt": {**good["fpt"], "backbone_dropout": 5}}, "saved dropout rates (5, "),
        ({"fpt": {**good["fpt"], "dropout": "0.1"}}, "fpt settings damaged"),
        ({"fpt": {**good["fpt"], "pooling": "max"}}, "pooling 'max'); export the run again"),
    ):
        config_path.write_text(json.dumps({**good, **damage}))
        raises_naming(lambda: FrozenPretrainedTransformer.from_pretrained(tmp_path / "hf"), words)
    from fpt.serve.predict import load_saved_model

    config_path.write_text(json.dumps({**good, "fpt": {**good["fpt"], "task_options": {"n_bits": "4"}}}))
    raises_naming(lambda: load_saved_model(tmp_path / "hf"), "task_options: n_bits must be int")
    config_path.write_text(json.dumps(good))
    weights = tmp_path / "hf" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    raises_naming(lambda: FrozenPretrainedTransformer.from_pretrained(tmp_path / "hf"), "truncated")


def test_a_vit_run_exports_whole_with_its_grown_positions_but_not_as_an_adapter(tmp_path, capsys):
    from transformers import ViTConfig, ViTModel

    ViTModel(
        ViTConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            image_size=16,
            patch_size=4,
        )
    ).save_pretrained(tmp_path / "vit")
    run = _train(str(tmp_path / "vit"), tmp_path / "run", "--n-bits", "40")  # 80 tokens; the ViT has 16 positions
    capsys.readouterr()
    assert main(["export", str(run), "--format", "peft", "--out", str(tmp_path / "peft")]) == 2
    assert "ViT" in capsys.readouterr().err and _nothing_left_beside(tmp_path / "peft")
    assert main(["export", str(run), "--format", "hf", "--out", str(tmp_path / "hf")]) == 0
    rebuilt = FrozenPretrainedTransformer.from_pretrained(tmp_path / "hf")
    assert rebuilt.extended_positions == (16, 80)
    batch, expected = _logits_of_run(run)
    with torch.no_grad():
        assert torch.equal(rebuilt(batch.x, batch.mask), expected)


def test_a_gpt_neo_cut_to_fewer_blocks_exports_and_rebuilds(tmp_path):
    """--layers also cuts the config's per-block list of attention kinds, which transformers checks
    against the block count when the export is built again (it refused the cut GPT-Neo before)."""
    from transformers import GPTNeoConfig, GPTNeoModel

    GPTNeoModel(
        GPTNeoConfig(
            hidden_size=32,
            num_layers=2,
            num_heads=2,
            attention_types=[[["global", "local"], 1]],
            max_position_embeddings=64,
            window_size=8,
            vocab_size=64,
        )
    ).save_pretrained(tmp_path / "neo")
    run = _train(str(tmp_path / "neo"), tmp_path / "run", "--layers", "1")
    assert main(["export", str(run), "--format", "hf", "--out", str(tmp_path / "hf")]) == 0
    rebuilt = FrozenPretrainedTransformer.from_pretrained(tmp_path / "hf")
    assert len(rebuilt.backbone.h) == 1 and rebuilt.backbone.config.attention_layers == ["global"]
    batch, expected = _logits_of_run(run)
    with torch.no_grad():
        assert torch.equal(rebuilt(batch.x, batch.mask), expected)
