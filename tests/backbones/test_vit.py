"""ViT backbones (the paper's ViT variant): tokens without CLS, patch positions, the fpt policy."""

import pytest
import torch

from fpt.backbones import load_backbone
from fpt.training.build import build
from fpt.training.config import TrainConfig


def _trained(model):
    return {n for n, p in model.named_parameters() if p.requires_grad}


# --- ViT backbones ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_vit(tmp_path_factory):
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("vit")
    ViTModel(
        ViTConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            image_size=16,
            patch_size=4,
        )
    ).save_pretrained(path)
    return str(path)


def test_vit_backbone_reads_tokens_without_cls_and_keeps_its_patch_positions(tiny_vit):
    from transformers import ViTModel

    backbone = load_backbone(tiny_vit)
    original = ViTModel.from_pretrained(tiny_vit).embeddings.position_embeddings[0, 1:]
    assert backbone.family == "vit" and backbone.max_positions == 16  # 4x4 patches, CLS row dropped
    assert torch.equal(backbone.model.vit.embeddings.position_embeddings.weight, original)
    names = [n for n, _ in backbone.model.named_parameters()]
    assert not any("cls_token" in n or "patch_embeddings" in n or "pooler" in n for n in names)


def test_vit_under_the_fpt_policy_trains_norms_positions_and_new_layers(tiny_vit):
    task, model = build(TrainConfig(backbone=tiny_vit, task="bit-xor", task_options={"eval_size": 8}))
    trained = _trained(model)
    assert any("position_embeddings" in n for n in trained) and any("layernorm" in n for n in trained)
    assert not any(".attention." in n or ".mlp." in n or "intermediate" in n for n in trained)
    batch = task.train_batch(0, 3, 0)
    logits = model(batch.x, batch.mask)
    assert logits.shape == (3, task.spec.num_outputs, task.spec.num_classes)
    logits.sum().backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if n in trained)


def test_vit_on_a_task_longer_than_its_patch_grid_grows_its_positions(tiny_vit):
    from fpt.tasks import create_task

    task = create_task("bit-memory", n_bits=100, patch_size=5, eval_size=4)  # 20 tokens > 16 positions
    _, model = build(
        TrainConfig(backbone=tiny_vit, task="bit-memory", task_options={"n_bits": 100, "patch_size": 5, "eval_size": 4})
    )
    assert model.extended_positions == (16, task.spec.seq_len)
    batch = task.train_batch(0, 2, 0)
    assert model(batch.x, batch.mask).shape[0] == 2


def test_a_vit_folder_whose_weights_do_not_fit_is_one_line_without_a_load_report(tiny_vit, tmp_path, capfd):
    # a ViT has no vocabulary, so it takes the plain load, where transformers raised its own error
    import json
    import shutil

    from fpt.core.errors import FptError

    wide = shutil.copytree(tiny_vit, tmp_path / "wide")
    config = json.loads((wide / "config.json").read_text())
    (wide / "config.json").write_text(json.dumps({**config, "intermediate_size": 128}))
    capfd.readouterr()
    with pytest.raises(FptError, match="6 of another shape than config.json says"):
        load_backbone(str(wide))
    assert "LOAD REPORT" not in capfd.readouterr().err
