"""The paper's fully trained baselines: sizes, shapes, and every parameter trained."""

import pytest
import torch

from fpt.core.errors import FptError
from fpt.models.baselines import build_baseline
from fpt.models.baselines.cnn import TutorialCNN, width_for_params
from fpt.tasks import create_task


def _count(module):
    return sum(p.numel() for p in module.parameters())


def test_tutorial_cnn_has_the_tutorials_122570_parameters_and_reads_patch_tokens():
    cnn = TutorialCNN(height=32, width=32, channels=3, patch_size=4)
    assert _count(cnn) == 122_570
    images = torch.randn(2, 3, 32, 32)
    from einops import rearrange

    tokens = rearrange(images, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=4, p2=4)
    with torch.no_grad():
        assert torch.allclose(cnn(tokens)[:, 0], cnn.classifier(cnn.features(images)), atol=1e-6)


def test_cnn_sized_to_a_parameter_budget():
    geometry = dict(height=28, width=28, channels=1, patch_size=4)
    for target in (20_000, 200_000):
        scale = width_for_params(target, **geometry)
        assert abs(_count(TutorialCNN(**geometry, width_scale=scale)) - target) / target < 0.05


def test_lstm_baselines_shapes_and_all_parameters_trained():
    task = create_task("bit-xor")
    for kind, layers in (("lstm", 3), ("lstm*", 12)):
        model = build_baseline(kind, task)
        batch = task.train_batch(0, 4, seed=0)
        logits = model(batch.x)
        assert logits.shape == (4, 5, 2)
        logits.sum().backward()
        assert all(p.grad is not None for p in model.parameters())
        assert set(model.trainable_state()) == {n for n, _ in model.named_parameters()}
    star = build_baseline("lstm*", task)
    assert len(star.body.blocks) == 12 and star.body.embedder.positions is not None


def test_cnn_needs_an_image_task():
    with pytest.raises(FptError, match="image task"):
        build_baseline("cnn", create_task("bit-xor"))
    with pytest.raises(FptError, match="unknown --model"):
        build_baseline("transformer-xl", create_task("bit-xor"))
