"""Image classification: MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-10 LRA, as patch tokens.

Pixels are stored as uint8 and become model inputs per batch: scaled to [0, 1], augmented
(training batches only, in torch), normalised, and cut into patch x patch tokens with einops.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange

from fpt.core.errors import MISSING_DATA, FptError
from fpt.core.paths import data_dir as default_data_dir
from fpt.core.paths import user_path
from fpt.tasks.arrays import ArrayTask, Split, carve_validation
from fpt.tasks.base import TaskSpec, check_patch_size, check_protocol
from fpt.tasks.registry import register_task

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)  # the paper's normalisation
CIFAR_STD = (0.2023, 0.1994, 0.2010)
GRAY_WEIGHTS = (0.299, 0.587, 0.114)  # ITU-R 601, as torchvision's Grayscale
PROTOCOLS = ("paper", "lra")


def data_dir(name: str, given: str | None) -> Path:
    """The task's data folder: --data-dir, else the fpt cache (where `fpt data get` puts it)."""
    path = user_path(given) if given else default_data_dir(name)
    if not path.is_dir():
        raise FptError(
            f"no {name} data at {path}: run `fpt data get {name}` or pass --data-dir DIR holding its files",
            kind=MISSING_DATA,
        )
    return path


def shift_and_flip(images: torch.Tensor, gen: torch.Generator, padding: int, flip: bool) -> torch.Tensor:
    """Random crop back to size after zero-padding by `padding` (a shift of up to that many pixels
    each way) and, with `flip`, a horizontal flip half the time; (B, C, H, W)."""
    batch, _, height, width = images.shape
    padded = F.pad(images, (padding,) * 4)
    offsets = torch.randint(0, 2 * padding + 1, (batch, 2), generator=gen).tolist()
    images = torch.stack([padded[i, :, y : y + height, x : x + width] for i, (y, x) in enumerate(offsets)])
    if flip:
        mirrored = torch.rand(batch, generator=gen) < 0.5
        images = torch.where(mirrored[:, None, None, None], images.flip(-1), images)
    return images


def augment_like_the_paper(images: torch.Tensor, gen: torch.Generator, max_degrees: float = 20.0) -> torch.Tensor:
    """RandomCrop(32, padding 4), horizontal flip, rotation up to +-20 degrees; (B, C, H, W) in [0, 1]."""
    batch = len(images)
    images = shift_and_flip(images, gen, padding=4, flip=True)
    angles = (torch.rand(batch, generator=gen) * 2 - 1) * math.radians(max_degrees)
    cos, sin = torch.cos(angles), torch.sin(angles)
    zeros = torch.zeros_like(cos)
    theta = torch.stack([torch.stack([cos, -sin, zeros], 1), torch.stack([sin, cos, zeros], 1)], 1)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


# (images (B, C, H, W) in [0, 1], generator) -> augmented images, for training batches only
Augmentation = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


def shift_digits(images: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """MNIST: a shift of up to 2 pixels each way; no flip, a mirrored digit is another glyph."""
    return shift_and_flip(images, gen, padding=2, flip=False)


def shift_and_mirror_clothes(images: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Fashion-MNIST: a shift of up to 2 pixels each way and a horizontal flip half the time
    (a mirrored shoe or shirt is still one)."""
    return shift_and_flip(images, gen, padding=2, flip=True)


class ImageTask(ArrayTask):
    """uint8 images (N, H, W, C) -> (B, H*W/p^2, p*p*C) continuous patch tokens, or pixel tokens."""

    def __init__(
        self,
        name: str,
        train: Split,
        evals: dict[str, Split],
        eval_split: str,
        patch_size: int,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        augment: Augmentation | None,
        grayscale: bool = False,
        pixel_tokens: bool = False,
    ):
        self.name = name
        super().__init__(train, evals, eval_split)
        height, width = train.x.shape[1:3]
        channels = 1 if grayscale else train.x.shape[3]
        check_patch_size(patch_size, math.gcd(height, width), f"the {height}x{width} images", tile=True)
        self.patch_size, self.augment, self.grayscale, self.pixel_tokens = patch_size, augment, grayscale, pixel_tokens
        self.mean, self.std = torch.tensor(mean), torch.tensor(std)
        tokens = (height // patch_size) * (width // patch_size)
        # what a CNN baseline needs to put the patches back into an image
        self.image_geometry = (
            None if pixel_tokens else dict(height=height, width=width, channels=channels, patch_size=patch_size)
        )
        if pixel_tokens:  # LRA: each 8-bit gray pixel is a token of a 256-entry vocabulary
            self.spec = TaskSpec(seq_len=tokens, num_classes=10, vocab_size=256)
        else:
            self.spec = TaskSpec(seq_len=tokens, num_classes=10, input_dim=patch_size * patch_size * channels)

    def prepare(self, x: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
        """Stored uint8 images -> model inputs: 8-bit gray pixel tokens (LRA), or pixels scaled to [0, 1], augmented on
        training batches, made gray where asked, normalised and cut into flattened patches."""
        if self.pixel_tokens:
            return to_gray_uint8(x).reshape(len(x), -1).long()
        images = x.permute(0, 3, 1, 2).float() / 255.0
        if gen is not None and self.augment is not None:
            images = self.augment(images, gen)
        if self.grayscale:
            images = (images * torch.tensor(GRAY_WEIGHTS)[:, None, None]).sum(1, keepdim=True)
        images = (images - self.mean[:, None, None]) / self.std[:, None, None]
        p = self.patch_size
        return rearrange(images, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=p, p2=p)


def to_gray_uint8(x: torch.Tensor) -> torch.Tensor:
    """(N, H, W, 3) uint8 -> (N, H, W) uint8 luminance, rounded."""
    return (x.float() @ torch.tensor(GRAY_WEIGHTS)).round().clamp(0, 255).to(torch.uint8)


def _mnist_like(name: str, data: str | None, patch_size: int, val_size: int, augment: Augmentation | None) -> ImageTask:
    from fpt.data.idx import load_mnist_dir

    folder = data_dir(name, data)
    splits = {}
    for split in ("train", "test"):
        images, labels = load_mnist_dir(folder, split)
        splits[split] = Split.from_numpy(images[..., None], labels)
    train, evals, during = carve_validation(splits["train"], splits["test"], val_size)
    return ImageTask(name, train, evals, during, patch_size, mean=(0.0,), std=(1.0,), augment=augment)


@register_task("mnist")
def mnist(data_dir: str | None = None, patch_size: int = 4, val_size: int = 0, augment: bool = False) -> ImageTask:
    """MNIST, 28x28 in [0, 1], 4x4 patches (49 tokens of 16 values); the full 60k / 10k splits
    (with val_size, that many of the 60k held out as 'val'); augment: `shift_digits`, off as in the paper."""
    return _mnist_like("mnist", data_dir, patch_size, val_size, shift_digits if augment else None)


@register_task("fashion-mnist")
def fashion_mnist(
    data_dir: str | None = None, patch_size: int = 4, val_size: int = 0, augment: bool = False
) -> ImageTask:
    """Fashion-MNIST, read and cut exactly as MNIST; augment: `shift_and_mirror_clothes`."""
    return _mnist_like("fashion-mnist", data_dir, patch_size, val_size, shift_and_mirror_clothes if augment else None)


def _cifar(data: str | None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    from fpt.data.cifar import load_cifar10_dir

    folder = data_dir("cifar10", data)
    return {split: load_cifar10_dir(folder, split) for split in ("train", "test")}


@register_task("cifar10")
def cifar10(data_dir: str | None = None, patch_size: int = 4, augment: bool = True, val_size: int = 0) -> ImageTask:
    """CIFAR-10, 4x4 patches (64 tokens of 48); the paper's augmentation and normalisation."""
    splits = {k: Split.from_numpy(*v) for k, v in _cifar(data_dir).items()}
    train, evals, during = carve_validation(splits["train"], splits["test"], val_size)
    return ImageTask(
        "cifar10", train, evals, during, patch_size, CIFAR_MEAN, CIFAR_STD, augment_like_the_paper if augment else None
    )


@register_task("cifar10-lra")
def cifar10_lra(data_dir: str | None = None, protocol: str = "paper", augment: bool | None = None) -> ImageTask:
    """Grayscale CIFAR-10, one pixel a token (1024 tokens).

    protocol "paper": continuous gray values in [0, 1] with the paper's augmentation, 50k train, test split.
    protocol "lra": 8-bit pixel tokens, no augmentation, 45k train / 5k val (the last 5k of the
    training batches), test split reported as well.
    """
    check_protocol(protocol, PROTOCOLS, "cifar10-lra")
    raw = _cifar(data_dir)
    if protocol == "paper":
        splits = {k: Split.from_numpy(*v) for k, v in raw.items()}
        return ImageTask(
            "cifar10-lra",
            splits["train"],
            {"test": splits["test"]},
            "test",
            1,
            (0.0,),
            (1.0,),
            None if augment is False else augment_like_the_paper,
            grayscale=True,
        )
    if augment:
        raise FptError("--augment is the paper protocol's; --protocol lra has none: drop it or give --protocol paper")
    images, labels = raw["train"]
    cut = len(images) - len(images) // 10  # LRA's 45k / 5k of the 50k training images
    train = Split.from_numpy(images[:cut], labels[:cut])
    val = Split.from_numpy(images[cut:], labels[cut:])
    test = Split.from_numpy(*raw["test"])
    return ImageTask(
        "cifar10-lra",
        train,
        {"val": val, "test": test},
        "val",
        1,
        (0.0,),
        (1.0,),
        None,
        grayscale=True,
        pixel_tokens=True,
    )
