"""Model FLOPs utilisation: what a training step computes, what this machine's matrix products
can do, and the speed a run reaches (ms per step, examples per second, MFU, ETA).

The convention (`CONVENTION`, written into summary.json) counts matrix products only, 2 FLOPs per
multiply-add, as PaLM's appendix B and nanoGPT do, but frozen weights are counted as computed: a
weight matrix of W entries costs 2W per token forward; backward, 2W for its input's gradient
(wherever something below it trains) plus 2W for its own gradient only where it trains. A frozen
linear layer's backward is 1x its forward, a trained one's 2x: a frozen body trains at 4W per
token, not the 6W of full fine-tuning. Attention's two products (scores and mixing) cost 4·T·d per
token and layer forward, 8·T·d backward (both operands need gradients), over the whole padded
length T: a causal mask is not halved. Token tables, norms, softmax and element-wise work are not
counted. MFU is the model FLOPs of the steps over their wall time and the measured peak.
"""

from __future__ import annotations

import functools
import json
import statistics
import time
from collections import deque
from dataclasses import dataclass

import torch
from torch import nn

CONVENTION = (
    "matmul FLOPs (2 per multiply-add); a weight's backward: 2x its forward where trained, "
    "1x where frozen (input gradient only); attention 4*T*d per token and layer forward, 8*T*d backward"
)
# what a run's evaluation rows and summary gain: wall-clock figures, which differ between two runs of
# the same cell (compare runs without them, as without elapsed_s)
SPEED_KEYS = ("ms_per_step", "examples_per_s", "mfu")


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def matmul_peak(n: int = 2048, repeats: int = 10, dtype=torch.float32, device="cpu") -> float:
    """FLOP/s of the best of `repeats` n x n products of `dtype` on `device` (a CPU: on all of
    torch's intra-op threads), after 3 untimed ones. benchmarks/perf.py's careful measure: 2048
    takes seconds on a CPU core; a run's meter uses `measured_peak`, which stays under a second."""
    device = torch.device(device)
    # a generator of its own: drawing from the global one would change the run's dropout masks, so
    # that a run shown progress (which measures the peak) would train otherwise than one without
    generator = torch.Generator(device).manual_seed(0)
    a, b = (torch.rand(n, n, generator=generator, device=device).to(dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    _synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        _synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


@functools.lru_cache(maxsize=None)
def _peak(dtype: torch.dtype, device: str, threads: int, budget_s: float) -> float:
    """Products of growing size (256, 512, ...) while the next one's predicted time fits the budget:
    small products miss the peak (cache misses, launch overhead), large ones take seconds on a CPU."""
    largest = 2048 if torch.device(device).type == "cpu" else 8192
    best, n, spent = 0.0, 256, 0.0
    while n <= largest:
        started = time.perf_counter()
        best = max(best, matmul_peak(n, repeats=3, dtype=dtype, device=device))
        spent += time.perf_counter() - started
        # the next size does 8x the work in each of its 6 products
        if spent + 8 * 6 * 2 * n**3 / best > budget_s:
            break
        n *= 2
    if torch.device(device).type == "cuda":  # hand the products' blocks back before the run allocates
        torch.cuda.empty_cache()
    return best


PEAKS_FILE = "peaks.json"  # in the fpt cache: one measured peak per machine, device, dtype and thread count


def _machine_key(dtype: torch.dtype, device: str, threads: int) -> str:
    from fpt.core.runtime import cpu_model

    name = cpu_model() if torch.device(device).type == "cpu" else torch.cuda.get_device_name(torch.device(device))
    return f"{name} | {device} | {str(dtype).removeprefix('torch.')} | {threads} threads | torch {torch.__version__}"


def measured_peak(dtype: torch.dtype, device: torch.device | str = "cpu", budget_s: float = 0.3) -> float:
    """This machine's matmul FLOP/s in `dtype` (a model's compute dtype: int8 storage computes in fp32 or
    bf16) on `device`, measured in about `budget_s` seconds the first time on a machine (per device,
    dtype, thread count and torch), then read from the fpt cache (PEAKS_FILE), so every run records its
    MFU whatever its output and no run pays for the measure twice. Measured at the threads the run
    trains with, so MFU compares like with like; a CPU shared with other work at that first time gives
    a lower peak, and so a higher MFU: delete the file to measure again."""
    from fpt.core.paths import cache_dir, write_json

    device, threads = str(torch.device(device)), torch.get_num_threads()
    key, path = _machine_key(dtype, device, threads), cache_dir() / PEAKS_FILE
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), (int, float)) and known[key] > 0:
        return float(known[key])
    peak = _peak(dtype, device, threads, budget_s)
    try:  # a read-only cache leaves the peak measured for this process alone
        write_json(path, {**(known if isinstance(known, dict) else {}), key: peak})
    except OSError:
        pass
    return peak


def _matmul_weights(module: nn.Module) -> tuple[int, int]:
    """(frozen, trained) entries of the weight matrices under `module`: linear layers, GPT-2's
    Conv1D and fpt's Int8Linear (always frozen); token tables and norms are not products."""
    frozen = trained = 0
    for layer in module.modules():
        weight = getattr(layer, "weight", None)
        if type(layer).__name__ == "Conv1D" and isinstance(weight, nn.Parameter):
            size = weight.numel()
        elif isinstance(getattr(layer, "in_features", None), int) and isinstance(layer.out_features, int):
            size = layer.in_features * layer.out_features
        else:
            continue
        if isinstance(weight, nn.Parameter) and weight.requires_grad:
            trained += size
        else:
            frozen += size
    return frozen, trained


def _layers_and_width(body: nn.Module) -> tuple[int, int]:
    """The body's attention layers and width, from its (Hugging Face) config."""
    config = body.config
    layers = getattr(config, "num_hidden_layers", None)  # 0 for --body none: not a missing value
    return int(config.n_layer if layers is None else layers), int(config.hidden_size)


def _linear_flops(frozen: int, trained: int, train: bool, input_gradient: bool) -> int:
    """FLOPs per row (token) through weight matrices of `frozen` and `trained` entries."""
    flops = 2 * (frozen + trained)
    if train:
        flops += 2 * trained + (2 * (frozen + trained) if input_gradient else 0)
    return flops


def flops_per_token(body: nn.Module, tokens_per_seq: float, train: bool) -> tuple[float, int]:
    """(FLOPs per token, weight-matrix entries) of a transformer body alone, in sequences of
    `tokens_per_seq` tokens, by `CONVENTION`: a training step (`train`) assumes the layer below
    the body trains (an input layer), so every weight's input gradient is computed."""
    frozen, trained = _matmul_weights(body)
    layers, width = _layers_and_width(body)
    attention = (12 if train else 4) * layers * tokens_per_seq * width
    return _linear_flops(frozen, trained, train, True) + attention, frozen + trained


@dataclass(frozen=True)
class ModelFlops:
    """The weight tallies of a FrozenPretrainedTransformer (input layer, body, head) that a
    step's FLOPs follow from; `of` reads them once, `step` prices a batch."""

    input_weights: tuple[int, int]  # (frozen, trained) entries; a token table has none
    body_weights: tuple[int, int]
    head_weights: tuple[int, int]
    head_rows: int  # rows per example through the head: its last k tokens, or 1 (mean, flatten)
    layers: int
    width: int
    below_head_trains: bool  # anything in the input layer or body trains: backward runs through the body

    @classmethod
    def of(cls, model: nn.Module) -> "ModelFlops | None":
        """The tallies of `model`, or None for a model that is not an input layer, a Hugging Face
        body and a head (the CNN and LSTM baselines): their MFU is left unknown."""
        parts = [getattr(model, name, None) for name in ("embedder", "backbone", "head")]
        if any(p is None for p in parts) or not hasattr(parts[1], "config"):
            return None
        embedder, body, head = parts
        layers, width = _layers_and_width(body)
        below = [p for part in (embedder, body) for p in part.parameters()]
        return cls(
            input_weights=_matmul_weights(embedder),
            body_weights=_matmul_weights(body),
            head_weights=_matmul_weights(head),
            head_rows=head.spec.last_k if head.pooling == "last" else 1,
            layers=layers,
            width=width,
            below_head_trains=any(p.requires_grad for p in below),
        )

    def step(self, examples: int, length: int, train: bool = True) -> float:
        """Model FLOPs of one step over `examples` sequences of `length` body tokens each (padding
        included: it is computed), forward and, with `train`, backward, by `CONVENTION`."""
        tokens = examples * length
        backward_body = train and self.below_head_trains
        flops = tokens * _linear_flops(*self.input_weights, train, False)  # its input is data
        flops += tokens * _linear_flops(*self.body_weights, train, self.below_head_trains)
        attention = 4 + (8 if backward_body else 0)
        flops += attention * self.layers * length * self.width * tokens
        flops += examples * self.head_rows * _linear_flops(*self.head_weights, train, self.below_head_trains)
        return float(flops)


class SpeedMeter:
    """What a run's progress bar and evaluation lines show: ms per step (the median of the last
    `window` steps), examples/s and MFU (over those steps' time), and the ETA to the step budget
    (steps left at that median, plus the evaluations still due at the last one's duration)."""

    def __init__(self, peak: float | None, devices: int = 1, window: int = 20):
        self.peak, self.devices = peak, devices  # peak: FLOP/s of one device; None: MFU unknown
        self.recent: deque[tuple[float, int, float | None]] = deque(maxlen=window)
        self.seconds, self.examples, self.flops = [], 0, 0.0  # this sitting's steps, for the summary
        self.flops_known = True
        self.eval_s: float | None = None

    def add_step(self, seconds: float, examples: int, flops: float | None) -> None:
        """Record one optimiser step: its wall time, its examples and its model FLOPs (None: unknown)."""
        self.recent.append((seconds, examples, flops))
        self.seconds.append(seconds)
        self.examples += examples
        self.flops_known = self.flops_known and flops is not None
        self.flops += flops or 0.0

    def _rates(self, seconds: list[float], examples: int, flops: float | None) -> dict:
        if not seconds:
            return dict.fromkeys(SPEED_KEYS)
        total = sum(seconds)
        known = self.peak is not None and flops is not None and total > 0
        return {
            "ms_per_step": round(1000 * statistics.median(seconds), 3),
            "examples_per_s": round(examples / total, 3) if total > 0 else None,
            # 4 significant digits: a tiny model's MFU is 1e-5 or less, and still worth reading
            "mfu": float(f"{flops / total / (self.peak * self.devices):.4g}") if known else None,
        }

    def recent_rates(self) -> dict:
        """{ms_per_step, examples_per_s, mfu} over the last steps; a value not yet known is None."""
        flops = [f for _, _, f in self.recent]
        total_flops = None if None in flops else sum(flops)
        return self._rates([s for s, _, _ in self.recent], sum(e for _, e, _ in self.recent), total_flops)

    def sitting_rates(self) -> dict:
        """The same over every step of this sitting, for summary.json."""
        return self._rates(self.seconds, self.examples, self.flops if self.flops_known else None)

    def eta_s(self, step: int, steps: int, eval_every: int) -> float | None:
        """Seconds until step `steps`, from step `step`; None before a step was timed."""
        if not self.recent:
            return None
        # due in (step, steps]: every eval_every-th step, and the last step where it is not one of them
        evals = steps // eval_every - step // eval_every + (1 if steps % eval_every and step < steps else 0)
        return (steps - step) * statistics.median(s for s, _, _ in self.recent) + evals * (self.eval_s or 0.0)


def describe_speed(rates: dict, eta_s: float | None = None, steps_per_s: bool = False) -> str:
    """'45 ms/step, 355 ex/s, MFU 12.3%, ETA 1:20' ('?' for what is unknown); `steps_per_s` adds the
    same median as a rate, '45 ms/step (22.2 step/s)', the unit a tqdm bar's readers look for."""
    ms, examples, mfu = rates["ms_per_step"], rates["examples_per_s"], rates["mfu"]
    rate = f" ({1000 / ms:.3g} step/s)" if steps_per_s and ms else ""
    parts = [
        "? ms/step" if ms is None else f"{ms:.3g} ms/step{rate}",
        "? ex/s" if examples is None else f"{examples:.4g} ex/s",
        "MFU ?" if mfu is None else f"MFU {100 * mfu:.3g}%",
    ]
    if eta_s is not None:
        parts.append(f"ETA {format_duration(eta_s)}")
    return ", ".join(parts)


def format_duration(seconds: float) -> str:
    """1:20, 1:02:03 (hours when there are any)."""
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
