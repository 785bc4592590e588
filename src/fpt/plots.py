"""Figures: the attention map of a trained run (the paper's Bit XOR figure)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from fpt.errors import FptError  # noqa: E402
from fpt.model import FrozenPretrainedTransformer  # noqa: E402
from fpt.tasks import Task  # noqa: E402


@torch.inference_mode()
def mean_attention(model: FrozenPretrainedTransformer, task: Task, layer: int, examples: int = 64) -> torch.Tensor:
    """Attention of one layer averaged over heads and over the first `examples` held-out inputs."""
    n_layers = model.backbone.config.num_hidden_layers
    if not 0 <= layer < n_layers:
        raise FptError(f"--layer must be between 0 and {n_layers - 1}, got {layer}")
    batch = next(iter(task.eval_batches(examples)))
    # Fused attention kernels do not return weights; the eager path does, with the same result.
    previous = model.backbone.config._attn_implementation
    model.backbone.set_attn_implementation("eager")
    try:
        model.eval()
        _, attentions = model(batch.x, batch.mask, output_attentions=True)
    finally:
        model.backbone.set_attn_implementation(previous)
    return attentions[layer].mean(dim=(0, 1))  # (query, key)


def plot_attention(attention: torch.Tensor, path: Path, title: str, last_k: int) -> Path:
    """Heatmap of (query, key) attention; the output tokens (the last k queries) are marked."""
    length = attention.shape[0]
    fig, ax = plt.subplots(figsize=(5.5, 4.8), dpi=120)
    image = ax.imshow(attention.numpy(), cmap="viridis", vmin=0)
    ax.set_xlabel("key position (attended to)")
    ax.set_ylabel("query position")
    ax.set_title(title, fontsize=10)
    if last_k < length:
        ax.axhline(length - last_k - 0.5, color="white", linewidth=0.8, linestyle="--")
        ax.text(length - 0.6, length - last_k - 0.7, "output tokens below", color="white",
                ha="right", va="bottom", fontsize=7)
    if length <= 32:
        ax.set_xticks(range(length))
        ax.set_yticks(range(length))
        ax.tick_params(labelsize=7)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="mean attention weight")
    fig.tight_layout()
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    """Write the figure atomically and close it."""
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)
    return path


def plot_confusion(matrix: list[list[int]], path: Path, title: str) -> Path:
    """Row-normalised confusion matrix (rows: true class, columns: predicted)."""
    counts = torch.tensor(matrix, dtype=torch.float64)
    rates = counts / counts.sum(1, keepdim=True).clamp_min(1)
    n = len(matrix)
    fig, ax = plt.subplots(figsize=(5.5, 4.8), dpi=120)
    image = ax.imshow(rates.numpy(), cmap="Blues", vmin=0, vmax=1)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    ax.set_title(title, fontsize=10)
    if n <= 20:
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
        for (i, j), value in np.ndenumerate(rates.numpy()):
            if value >= 0.005:
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if value > 0.5 else "black")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="share of the true class")
    fig.tight_layout()
    return _save(fig, path)
