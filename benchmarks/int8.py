"""int8 frozen weights (fpt.backbones.int8) against fp32 on this CPU: speed of the frozen linear
layers and of a whole MiniLM body, and the outputs' error against fp32.

    taskset -c 1 env OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/int8.py speed
    taskset -c 1 env OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/int8.py accuracy
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/int8.py step --repeats 12 --out step_zen4.json   # idle, both cores
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/int8.py step --repeats 12 \
        --tasks bit-memory-fast mnist-shape mnist-7x7-shape --out fast_recipe_steps_zen4.json   # time to accuracy

Speed: each variant is timed on the same inputs, the variants interleaved within each repeat
(so a slow spell of the machine hits them all), medians reported. Variants: `fp32` (nn.Linear,
frozen weight), `int8-fp32` (int8 storage, dequantised per call, fp32 product) and `int8-fbgemm`
(int8 storage and int8 products, activations quantised per token). Modes: `forward` (no grad,
as in evaluation) and `train` (forward and the input's gradient, as in an fpt training step).
`step` times fpt's whole training step (loss, backward, Adam) with bf16 and int8 variants beside fp32.

Writes benchmarks/results/int8/WHAT.json (or --out) with the CPU model and flags; benchmarks/speed.md's table
reads step_*.json, so name a `step` record for its machine (`--out step_zen4.json`); benchmarks/speed.md's
time-to-accuracy table reads fast_recipe_steps_*.json (the fast recipe's shapes) beside the headline runs' metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from fpt.backbones.int8 import GROUP_SIZE, Int8Linear, quantize_frozen_linears  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "int8"
TOKENS = 32 * 49  # batch 32 x 49 tokens: MNIST's shape in fpt
LAYERS = {  # (in, out) of the frozen linear layers of each body
    "minilm-qkv": (384, 384),
    "minilm-ffn-up": (384, 1536),
    "minilm-ffn-down": (1536, 384),
    "gpt2-qkv": (768, 2304),
    "gpt2-ffn-up": (768, 3072),
    "gpt2-ffn-down": (3072, 768),
}
# name: (compute, group size) of the int8 layers; None: the fp32 layer itself
VARIANTS = {
    "fp32": None,
    "int8-fp32": ("fp32", None),  # one scale per output channel
    "int8-fp32-g128": ("fp32", GROUP_SIZE),  # one scale per 128 inputs of a channel
    "int8-fbgemm": ("fbgemm", None),
}


def machine() -> dict:
    info = {"platform": platform.platform(), "torch": torch.__version__, "threads": torch.get_num_threads()}
    try:
        text = Path("/proc/cpuinfo").read_text()
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        info["cpu"] = fields.get("model name\t", "").strip()
        info["flags"] = sorted(f for f in fields.get("flags\t\t", "").split() if f.startswith(("avx", "amx", "fma")))
    except OSError:
        pass
    info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    info["affinity"] = sorted(os.sched_getaffinity(0))
    return info


def make(variant: str, layer: nn.Linear) -> nn.Module:
    return layer if VARIANTS[variant] is None else Int8Linear.from_float(layer, *VARIANTS[variant])


def step(module: nn.Module, x: torch.Tensor, grad: torch.Tensor | None) -> None:
    if grad is None:
        with torch.no_grad():
            module(x)
    else:
        x.grad = None
        module(x).backward(grad)


def timed(fn) -> float:
    """Seconds of this thread's CPU time: on a core shared with other processes, wall time counts
    their turns too (both are recorded by `interleaved`; CPU time is the comparable one there)."""
    start = time.thread_time()
    fn()
    return time.thread_time() - start


def interleaved(runs: dict, repeats: int) -> dict[str, float]:
    """{variant: median CPU seconds}: every repeat runs each variant once, in turn. The wall-clock
    medians go into WALL."""
    for fn in runs.values():  # warm-up: allocations, packing, first-call dispatch
        fn()
    times = {name: [] for name in runs}
    walls = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            times[name].append(timed(fn))
            walls[name].append(time.perf_counter() - start)
    WALL.clear()
    WALL.update({name: statistics.median(values) for name, values in walls.items()})
    return {name: statistics.median(values) for name, values in times.items()}


WALL: dict[str, float] = {}
INT8 = [v for v in VARIANTS if v != "fp32"]


def speed_layers(repeats: int, shapes: list[str], variants: list[str]) -> list[dict]:
    rows = []
    for shape_name in shapes:
        fan_in, fan_out = LAYERS[shape_name]
        torch.manual_seed(0)
        layer = nn.Linear(fan_in, fan_out).requires_grad_(False)
        modules = {v: make(v, layer) for v in variants}
        x = torch.randn(TOKENS, fan_in, requires_grad=True)
        grad = torch.randn(TOKENS, fan_out)
        flops = 2 * TOKENS * fan_in * fan_out
        for mode in ("forward", "train"):
            g = None if mode == "forward" else grad
            medians = interleaved({v: (lambda m=m: step(m, x, g)) for v, m in modules.items()}, repeats)
            for variant, seconds in medians.items():
                gflop = flops * (1 if mode == "forward" else 2) / 1e9
                rows.append(
                    {
                        "layer": shape_name,
                        "in": fan_in,
                        "out": fan_out,
                        "tokens": TOKENS,
                        "mode": mode,
                        "variant": variant,
                        "cpu_ms": round(seconds * 1e3, 3),
                        "wall_ms": round(WALL[variant] * 1e3, 3),
                        "gflop_s": round(gflop / seconds, 1),
                        "vs_fp32": round(medians["fp32"] / seconds, 3),
                    }
                )
            print(shape_name, mode, {v: round(s * 1e3, 2) for v, s in medians.items()}, flush=True)
    return rows


def minilm(variant: str):
    from fpt.backbones import load_backbone

    backbone = load_backbone("minilm", dropout=0.0)
    body = backbone.model.eval().requires_grad_(False)
    if VARIANTS[variant] is not None:
        quantize_frozen_linears(body, *VARIANTS[variant])
    return body


def body_step(body: nn.Module, embeds: torch.Tensor, train: bool) -> torch.Tensor:
    if not train:
        with torch.no_grad():
            return body(inputs_embeds=embeds).last_hidden_state
    embeds.grad = None
    out = body(inputs_embeds=embeds).last_hidden_state
    out.square().mean().backward()
    return out


def speed_body(repeats: int) -> list[dict]:
    """A whole frozen MiniLM body (6 layers, 384 wide) at batch 32 x 49, inputs needing gradients as in fpt."""
    torch.manual_seed(0)
    bodies = {v: minilm(v) for v in ("fp32", "int8-fp32", "int8-fbgemm")}
    embeds = torch.randn(32, 49, 384, requires_grad=True)
    rows = []
    for mode in ("forward", "train"):
        runs = {v: (lambda b=b: body_step(b, embeds, mode == "train")) for v, b in bodies.items()}
        medians = interleaved(runs, repeats)
        for variant, seconds in medians.items():
            rows.append(
                {
                    "layer": "minilm-body",
                    "tokens": TOKENS,
                    "mode": mode,
                    "variant": variant,
                    "cpu_ms": round(seconds * 1e3, 3),
                    "wall_ms": round(WALL[variant] * 1e3, 3),
                    "vs_fp32": round(medians["fp32"] / seconds, 3),
                }
            )
        print("minilm-body", mode, {v: round(s * 1e3, 2) for v, s in medians.items()}, flush=True)
    return rows


# a whole training step: name -> (fpt's --precision, what is changed after the model is built)
STEP_VARIANTS = {
    "fp32": ("fp32", None),
    "bf16": ("bf16", None),  # frozen weights in bf16, bf16 products (autocast)
    "int8": ("int8", None),  # --precision int8: 128-wide groups of scales, fp32 products
    "int8-bf16": ("int8-bf16", None),  # the same storage, its products in bf16 (autocast)
    "int8-fbgemm": ("fp32", "fbgemm"),  # per-channel scales, int8 products (fbgemm)
}
STEP_TASKS = {  # name: (batch, a task's name | (tokens, values per token) for random patches)
    "mnist-shape": (32, (49, 16)),  # 4x4 patches at the fast recipe's batch
    "bit-memory": (16, "bit-memory"),  # the paper recipe's batch
    "bit-memory-fast": (32, "bit-memory"),  # the fast recipe's batch, the headline runs'
    "mnist-7x7-shape": (32, (16, 49)),  # 7x7 patches (--patch-size 7) at the fast recipe's batch
}


def step_model(task_spec, variant: str):
    """An fpt model on the packaged MiniLM built as STEP_VARIANTS[variant] says, seeded the same every time."""
    from fpt.backbones import load_backbone
    from fpt.models.transformer import FrozenPretrainedTransformer

    precision, change = STEP_VARIANTS[variant]
    torch.manual_seed(0)  # the same input layer and head every time
    backbone = load_backbone("minilm", dropout=0.0)
    model = FrozenPretrainedTransformer(backbone, task_spec, dropout=0.0, precision=precision)
    if change == "fbgemm":
        quantize_frozen_linears(model.backbone, "fbgemm", None)
    return model


def speed_step(repeats: int, tasks: list[str]) -> list[dict]:
    """fpt's whole training step (forward, loss, backward, Adam) for each STEP_VARIANTS entry on each of
    `tasks` (STEP_TASKS). Timed by wall clock: it runs on every thread torch has, so the machine must be idle."""
    from fpt.tasks import create_task

    sys.path.insert(0, str(Path(__file__).parent))
    from perf import RandomPatches

    rows = []
    for name in tasks:
        batch_size, shape = STEP_TASKS[name]
        task = create_task(shape) if isinstance(shape, str) else RandomPatches(*shape)
        batch = task.train_batch(0, batch_size, 0)
        runs = {}
        for variant in STEP_VARIANTS:
            model = step_model(task.spec, variant)
            adam = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
            runs[variant] = lambda model=model, adam=adam: train_step(model, adam, batch)
        interleaved(runs, repeats)
        for variant, seconds in WALL.items():
            row = {"task": name, "batch": batch_size, "variant": variant, "wall_ms": round(seconds * 1e3, 1)}
            rows.append(
                {**row, "vs_fp32": round(WALL["fp32"] / seconds, 3), "vs_bf16": round(WALL["bf16"] / seconds, 3)}
            )
        print(name, {v: round(s * 1e3, 1) for v, s in WALL.items()}, flush=True)
    return rows


def train_step(model, adam, batch) -> None:
    """One fpt training step: forward, cross-entropy, backward, Adam."""
    adam.zero_grad()
    logits = model(batch.x)
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.y.flatten()).backward()
    adam.step()


def fpt_model(task_spec, variant: str):
    from fpt.backbones import load_backbone
    from fpt.models.transformer import FrozenPretrainedTransformer

    torch.manual_seed(0)  # the same input layer and head every time
    model = FrozenPretrainedTransformer(load_backbone("minilm", dropout=0.0), task_spec, dropout=0.0)
    if VARIANTS[variant] is not None:
        quantize_frozen_linears(model.backbone, *VARIANTS[variant])
    return model


def logits_and_gradient(model, batch) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The logits, the trained parameters' gradient (one flat vector) and the loss of one batch."""
    model.zero_grad()
    logits = model(batch.x)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.y.flatten())
    loss.backward()
    grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])
    return logits.detach(), grad, loss.item()


def compare(got: torch.Tensor, ref: torch.Tensor) -> dict:
    return {
        "max_abs": (got - ref).abs().max().item(),
        "ref_max_abs": ref.abs().max().item(),
        "rel_l2": ((got - ref).norm() / ref.norm()).item(),
        "cosine": torch.nn.functional.cosine_similarity(got.flatten(), ref.flatten(), 0).item(),
    }


def accuracy() -> dict:
    """The packaged MiniLM inside an fpt model (its input layer and head, as a step at initialisation
    sees them), int8 against fp32: logits, the loss, and the gradient of every trained parameter;
    on a Bit Memory batch (1000 bits in 20 tokens) and the MNIST shape (49 tokens of 16 random values).
    Also the bare body on N(0, 1) embeddings, far larger than an fpt input layer gives it (a stress case)."""
    from fpt.tasks import create_task

    sys.path.insert(0, str(Path(__file__).parent))
    from perf import RandomPatches

    out = {}
    for name, task in (("bit-memory", create_task("bit-memory")), ("mnist-shape", RandomPatches())):
        batch = task.train_batch(0, 32, 0)
        ref_logits, ref_grad, ref_loss = logits_and_gradient(fpt_model(task.spec, "fp32"), batch)
        for variant in INT8:
            logits, grad, loss = logits_and_gradient(fpt_model(task.spec, variant), batch)
            row = {
                "logits": compare(logits, ref_logits),
                "predictions_agree": (logits.argmax(-1) == ref_logits.argmax(-1)).float().mean().item(),
                "loss": loss,
                "loss_fp32": ref_loss,
                "trained_gradient": compare(grad, ref_grad),
            }
            out[f"{name}/{variant}"] = row
            print(name, variant, json.dumps(row), flush=True)
    torch.manual_seed(0)
    embeds = torch.randn(32, 49, 384)
    ref = body_step(minilm("fp32"), embeds, False)
    for variant in INT8:
        out[f"body-randn-embeds/{variant}"] = {"last_hidden": compare(body_step(minilm(variant), embeds, False), ref)}
        print("body-randn", variant, out[f"body-randn-embeds/{variant}"], flush=True)
    return out


def rss_gb() -> dict:
    """This process's resident memory now and at its peak (ru_maxrss: KiB on Linux), in GB."""
    now = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"rss_gb": round(now / 1e9, 2), "peak_rss_gb": round(peak / 1e9, 2)}


def available_gb() -> float:
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return int(fields["MemAvailable"].split()[0]) / 1e6


def llama7b(tokens: int, layers: int, checkpointing: bool, compute: str, path: Path) -> dict:
    """A Llama-7B-architecture body, random init, built block by block so that the fp32 model never
    exists whole: the body is made on the meta device (no memory), then each block is given real
    fp32 weights, drawn, frozen and quantised before the next one is; then one forward and backward
    at batch 1 x `tokens` with the norms trained, as fpt's policy would. The record is rewritten to
    `path` after each block and phase, so a run stopped part way says how far it got."""
    from accelerate import init_empty_weights
    from transformers import LlamaConfig, LlamaModel

    record = {"tokens": tokens, "layers": layers, "checkpointing": checkpointing, "compute": compute}
    started = time.perf_counter()

    def note(key: str, **more) -> None:
        record[key] = {**rss_gb(), "elapsed_s": round(time.perf_counter() - started, 1), **more}
        record["reached"] = key
        path.write_text(json.dumps({"machine": machine(), **record}, indent=1) + "\n")

    free = available_gb()
    record["available_gb_at_start"] = round(free, 1)
    if free < 14:
        record["aborted"] = f"only {free:.1f} GB available, under the 14 GB this probe needs to start"
        note("aborted")
        return record
    config = LlamaConfig(
        hidden_size=4096,
        num_hidden_layers=layers,
        num_attention_heads=32,
        num_key_value_heads=32,
        intermediate_size=11008,
        vocab_size=32000,
        max_position_embeddings=4096,
        attn_implementation="sdpa",
    )
    with init_empty_weights():  # parameters on the meta device; buffers (rotary frequencies) real
        body = LlamaModel(config)
    body.embed_tokens = nn.Identity()  # fpt drops the token table and passes inputs_embeds
    torch.manual_seed(0)
    bound = config.initializer_range * 3**0.5  # uniform with the init's std: cheaper to draw than normal
    for index, block in enumerate([*body.layers, body.norm]):
        block.to_empty(device="cpu")
        for module in block.modules():
            if isinstance(module, nn.Linear):
                nn.init.uniform_(module.weight, -bound, bound)
                module.requires_grad_(False)
            elif "norm" in type(module).__name__.lower():
                nn.init.ones_(module.weight)  # trained, as fpt's layernorm group
        if index < layers:
            quantize_frozen_linears(block, compute)
            note(f"built_block_{index}")
    record["trained_params"] = sum(p.numel() for p in body.parameters() if p.requires_grad)
    record["int8_weight_bytes"] = sum(b.numel() for b in body.buffers() if b.dtype == torch.int8)
    note("built")
    if checkpointing:
        body.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    body.train()
    for index, block in enumerate(body.layers):
        block.register_forward_hook(lambda *_, i=index: note(f"forward_block_{i}"))
    embeds = (torch.randn(1, tokens, 4096) * 0.02).requires_grad_(True)  # as a trained input layer gives
    out = body(inputs_embeds=embeds).last_hidden_state
    note("forward")
    out.square().mean().backward()
    note(
        "backward",
        norms_with_gradient=sum(p.grad is not None for p in body.parameters() if p.requires_grad),
        finite=bool(torch.isfinite(out).all())
        and all(bool(torch.isfinite(p.grad).all()) for p in body.parameters() if p.grad is not None),
    )
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("speed", "step", "accuracy", "llama7b"))
    parser.add_argument("--shapes", nargs="+", default=list(LAYERS), help="speed: layer shapes")
    parser.add_argument("--variants", nargs="+", default=["fp32", "int8-fp32", "int8-fbgemm"], help="speed")
    parser.add_argument("--no-body", action="store_true", help="speed: the layers only, not a whole MiniLM")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument(
        "--tasks", nargs="+", choices=list(STEP_TASKS), default=["mnist-shape", "bit-memory"], help="step: shapes"
    )
    parser.add_argument("--tokens", type=int, default=512, help="llama7b: sequence length (batch 1)")
    parser.add_argument("--layers", type=int, default=32, help="llama7b: blocks (32 in Llama-7B)")
    parser.add_argument("--checkpointing", action="store_true", help="llama7b: recompute each block in backward")
    parser.add_argument("--compute", default="fp32", help="llama7b: int8 compute (fp32 or fbgemm)")
    parser.add_argument(
        "--out", help="result file name in benchmarks/results/int8 (default: WHAT.json, llama7b_memory.json)"
    )
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.what == "llama7b":
        path = RESULTS / (args.out or "llama7b_memory.json")
        llama7b(args.tokens, args.layers, args.checkpointing, args.compute, path)
        print(path.read_text())
        return
    if args.what in ("speed", "step"):
        timing = {
            "speed": "medians of interleaved repeats: thread CPU time (cpu_ms, used for vs_fp32), wall time (wall_ms)",
            "step": "medians of interleaved repeats, wall time (an idle machine, every thread torch has)",
        }[args.what]
        result = {"machine": machine(), "repeats": args.repeats, "timing": timing, "load_average": os.getloadavg()}
        if args.what == "step":
            result["rows"] = speed_step(args.repeats, args.tasks)
        else:
            result["rows"] = speed_layers(args.repeats, args.shapes, args.variants)
            result["rows"] += [] if args.no_body else speed_body(args.repeats)
    else:
        result = {"machine": machine(), "backbone": "minilm (packaged, pretrained)", "batch": [32, 49], **accuracy()}
    path = RESULTS / (args.out or f"{args.what}.json")
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
