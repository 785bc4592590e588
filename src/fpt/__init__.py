"""fpt: Frozen Pretrained Transformers."""
