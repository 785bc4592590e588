"""The CIFAR-10 CNN of the seed tutorial: Conv 32 - Pool - Conv 64 - Pool - Conv 64 - Dense 64 - Dense 10.

At width 1 on 32x32x3 images it has 122,570 parameters (valid 3x3 convolutions, 2x2 max pools),
about 70% CIFAR-10 test accuracy after 10 epochs. `width` scales every layer, so the CNN can be
sized to another model's trainable parameter count (`width_for_params`). It reads the patch
tokens the image tasks produce and puts the image back together first.
"""

from __future__ import annotations

from einops import rearrange
from torch import nn

from fpt.core.errors import FptError


class TutorialCNN(nn.Module):
    """The PyTorch tutorial's CNN (3 convolutions, 2 dense layers), reading the image tasks' patch tokens put back
    together as images; `width_scale` widens every layer (cnn-matched)."""

    def __init__(
        self, height: int, width: int, channels: int, patch_size: int, num_classes: int = 10, width_scale: float = 1.0
    ):
        super().__init__()
        c1, c2, dense = (max(1, round(n * width_scale)) for n in (32, 64, 64))
        self.geometry = dict(h=height // patch_size, w=width // patch_size, p1=patch_size, p2=patch_size, c=channels)
        self.features = nn.Sequential(
            nn.Conv2d(channels, c1, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c2, c2, 3),
            nn.ReLU(),
        )
        side_h, side_w = _after_features(height), _after_features(width)
        if side_h < 1 or side_w < 1:
            raise FptError(f"the tutorial CNN needs images of at least 18x18 pixels, got {height}x{width}")
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(c2 * side_h * side_w, dense), nn.ReLU(), nn.Linear(dense, num_classes)
        )

    def forward(self, x, mask=None):
        """Patch tokens (B, tokens, patch * patch * channels) -> logits (B, 1, num_classes); `mask` unused (images have
        one size)."""
        images = rearrange(x, "b (h w) (p1 p2 c) -> b c (h p1) (w p2)", **self.geometry)
        return self.classifier(self.features(images)).unsqueeze(1)  # (B, 1, classes)


def _after_features(side: int) -> int:
    return ((side - 2) // 2 - 2) // 2 - 2


def width_for_params(target: int, **geometry) -> float:
    """The width scale whose CNN has the parameter count closest to `target` (bisection)."""
    low, high = 0.05, 64.0
    for _ in range(40):
        mid = (low * high) ** 0.5
        count = sum(p.numel() for p in TutorialCNN(**geometry, width_scale=mid).parameters())
        low, high = (mid, high) if count < target else (low, mid)
    return (low * high) ** 0.5
