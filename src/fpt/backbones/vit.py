"""Vision transformers as backbones (the paper's ViT variant).

A ViT reads pixels through its patch embedding and prepends a CLS token; fpt instead feeds its
own input layer's tokens and reads the last token, so `ViTBody` keeps the encoder blocks, the
final layer norm and the patch position table (CLS row dropped), and takes `inputs_embeds` like
a language backbone. The rest of fpt (groups, freezing, --layers, longer tasks) then treats it
like any other backbone.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutput


class _TokenEmbeddings(nn.Module):
    """Replaces ViTEmbeddings: tokens in, tokens + learned positions out (no patches, no CLS)."""

    def __init__(self, positions: torch.Tensor, dropout: float):
        super().__init__()
        self.position_embeddings = nn.Embedding(positions.shape[0], positions.shape[1], dtype=positions.dtype)
        with torch.no_grad():
            self.position_embeddings.weight.copy_(positions)
        self.dropout = nn.Dropout(dropout)

    @property
    def patch_embeddings(self):
        # ViTModel.forward casts its input to the patch projection's dtype; point it at ours.
        return SimpleNamespace(projection=SimpleNamespace(weight=self.position_embeddings.weight))

    def forward(self, tokens: torch.Tensor, **_unused) -> torch.Tensor:
        positions = self.position_embeddings(torch.arange(tokens.shape[1], device=tokens.device))
        return self.dropout(tokens + positions)


class ViTBody(nn.Module):
    """A Hugging Face ViT model taking `inputs_embeds` (the interface fpt uses for backbones)."""

    def __init__(self, vit: nn.Module):
        super().__init__()
        table = vit.embeddings.position_embeddings.detach()[0, 1:]  # drop the CLS position
        vit.embeddings = _TokenEmbeddings(table, vit.config.hidden_dropout_prob)
        vit.pooler = None
        self.vit = vit

    @property
    def config(self):
        """The wrapped ViT's Hugging Face config (hidden size, layers, heads), read as a backbone's."""
        return self.vit.config

    def set_attn_implementation(self, implementation: str) -> None:
        """Pass transformers' attention choice ("eager", "sdpa", ...) to the wrapped ViT."""
        self.vit.set_attn_implementation(implementation)

    def forward(
        self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor | None = None, output_attentions: bool = False
    ) -> BaseModelOutput:
        """Token vectors (B, L, hidden), L at most the patch count of the position table -> BaseModelOutput with
        last_hidden_state (B, L, hidden) after the encoder and final layer norm, and per-layer attentions
        (B, heads, L, L) when `output_attentions`."""
        out = self.vit(pixel_values=inputs_embeds, attention_mask=attention_mask, output_attentions=output_attentions)
        return BaseModelOutput(last_hidden_state=out.last_hidden_state, attentions=out.attentions)


def is_vit(model: nn.Module) -> bool:
    """A model built like transformers' ViTModel (ViT, DeiT and kin): patch embeddings + CLS."""
    embeddings = getattr(model, "embeddings", None)
    return (
        hasattr(embeddings, "patch_embeddings")
        and hasattr(embeddings, "cls_token")
        and isinstance(getattr(embeddings, "position_embeddings", None), nn.Parameter)
    )
