"""CPU attention with and without dropout on the attention probabilities, forward + backward.

    taskset -c 0 .venv/bin/python benchmarks/attention_kernel.py     # on an idle core

Why: PyTorch's scaled_dot_product_attention takes its fused (flash) CPU kernel only when
dropout_p is 0, and the plain one otherwise. On long inputs (ListOps, 2,000 tokens) the fused
one is several times faster; on Fashion-MNIST's 49 tokens (4x4 patches) in bf16, runs without
dropout were a third slower (README, "Next candidates"). This times both at MiniLM's head shape
(12 heads of 32), batch 32, one thread, in fp32 and bf16, at a short and a long length.
"""

from __future__ import annotations

import time

import torch


def time_ms(length: int, dtype: torch.dtype, dropout_p: float, repeats: int) -> float:
    q, k, v = (torch.randn(32, 12, length, 32, dtype=dtype, requires_grad=True) for _ in range(3))

    def step() -> None:
        torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p).sum().backward()

    for _ in range(3):  # warm-up
        step()
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return 1000 * (time.perf_counter() - start) / repeats


def main() -> None:
    torch.set_num_threads(1)
    print("| tokens | dtype | dropout 0 (fused kernel) | dropout 0.1 (plain kernel) |\n|---|---|---|---|")
    for length, repeats in ((49, 50), (512, 5)):
        for dtype in (torch.float32, torch.bfloat16):
            fused, plain = (time_ms(length, dtype, p, repeats) for p in (0.0, 0.1))
            print(f"| {length} | {str(dtype).removeprefix('torch.')} | {fused:.1f} ms | {plain:.1f} ms |")


if __name__ == "__main__":
    main()
