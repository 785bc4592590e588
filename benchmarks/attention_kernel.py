"""CPU attention: PyTorch's fused kernel against its plain one, by length and precision.

    taskset -c 0 .venv/bin/python benchmarks/attention_kernel.py     # on an idle machine

Why: scaled_dot_product_attention takes its fused (flash) CPU kernel when dropout_p is 0 and
its plain one otherwise. On long inputs (ListOps, 2,000 tokens) the fused one is several times
faster; on Fashion-MNIST's 49 tokens (4x4 patches) in bf16, runs without dropout were a third
slower. This times both kernels at MiniLM's head shape (12 heads of 32), batch 32, one thread,
in fp32 and bf16, across lengths, to find where the fused kernel starts to win:
fpt.core.devices.attention_kernel uses that crossover.
"""

from __future__ import annotations

import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

LENGTHS = ((49, 40), (64, 40), (128, 20), (256, 8), (512, 4))  # (tokens, timed repeats)


def time_ms(
    length: int, dtype: torch.dtype, backend: SDPBackend, dropout_p: float, repeats: int, backward: bool
) -> float:
    q, k, v = (torch.randn(32, 12, length, 32, dtype=dtype, requires_grad=backward) for _ in range(3))

    def step() -> None:
        with sdpa_kernel([backend]):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
        if backward:
            out.sum().backward()

    for _ in range(3):  # warm-up
        step()
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return 1000 * (time.perf_counter() - start) / repeats


def main() -> None:
    torch.set_num_threads(1)
    fused, plain = SDPBackend.FLASH_ATTENTION, SDPBackend.MATH
    print("| tokens | dtype | fwd+bwd fused | fwd+bwd plain | fwd+bwd plain, dropout 0.1 | fwd fused | fwd plain |")
    print("|---|---|---|---|---|---|---|")
    for length, repeats in LENGTHS:
        for dtype in (torch.float32, torch.bfloat16):
            cases = (
                (fused, 0.0, True),
                (plain, 0.0, True),
                (plain, 0.1, True),
                (fused, 0.0, False),
                (plain, 0.0, False),
            )  # (kernel, dropout, with backward): the table's columns
            times = [time_ms(length, dtype, kernel, p, repeats, backward) for kernel, p, backward in cases]
            cells = " | ".join(f"{t:.1f} ms" for t in times)
            print(f"| {length} | {str(dtype).removeprefix('torch.')} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
