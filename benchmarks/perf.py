"""Training speed of fpt against the plain PyTorch loop a user would write, and against the
machine's own matmul peak, measured in one run on this machine.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/perf.py            # everything (about 20 min on 2 cores)
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/perf.py --only minilm-bit-memory gpt2-mnist

Each (configuration, variant) runs in its own process, so peak resident memory is its own.
Variants: `peer` (Hugging Face model loaded as usual, attention and feed-forward frozen by
requires_grad, a linear input and output layer, Adam, cross-entropy, eager, fp32), `fpt` (fpt's
own training step with its default, exact settings), and opt-in levers (`fpt+bf16`,
`fpt+ckpt`, `fpt+compile`). Both sides see the same batches, seed and dropout, so their loss
trajectories can be compared step by step.

Writes benchmarks/results/perf.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from fpt.tasks.base import Batch, Task, TaskSpec, step_generator  # noqa: E402
from fpt.training.speed import CONVENTION, flops_per_token, matmul_peak  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "perf.json"

# name: backbone, init, task kind, batch size, variants
CONFIGS = {
    "minilm-bit-memory": dict(
        backbone="minilm",
        init="pretrained",
        task="bit-memory",
        batch=16,
        variants=["peer", "fpt", "fpt+bf16", "fpt+compile"],
    ),
    "minilm-mnist": dict(
        backbone="minilm", init="pretrained", task="mnist-shape", batch=32, variants=["peer", "fpt", "fpt+bf16"]
    ),
    "gpt2-mnist": dict(
        backbone="gpt2", init="random", task="mnist-shape", batch=32, variants=["peer", "fpt", "fpt+bf16"]
    ),
    # Llama's attention dropout defaults to 0 in transformers, fpt's to --dropout: 0 on both sides here.
    "smollm2-mnist": dict(
        backbone="smollm2-135m",
        init="pretrained",
        task="mnist-shape",
        batch=32,
        attention_dropout=0.0,
        variants=["peer", "fpt", "fpt+ckpt", "fpt+bf16"],
    ),
    # Attention dropout off on every side: with it, CPU attention cannot use its fused kernel and
    # stores batch x heads x 2000^2 probabilities per layer (24 GB are not enough at batch 8).
    # 16 steps = two bucketing windows of 8 batches: every variant sees the same 128 examples.
    "listops": dict(
        backbone="minilm",
        init="pretrained",
        task="listops",
        batch=8,
        attention_dropout=0.0,
        variants=["peer-pad2000", "fpt", "fpt+bucket"],
    ),
    "gpt2-xl-scale": dict(
        backbone="gpt2-xl", init="random", task="scale-shape", batch=4, variants=["fpt", "fpt+bf16+ckpt"]
    ),
}


# --- tasks with the benchmark's shapes ----------------------------------------------------------


class RandomPatches(Task):
    """The MNIST shape without the data: 49 tokens of 16 values (4x4 patches; 16 of 49 for 7x7), 10 classes,
    fresh per step."""

    name, eval_split = "mnist-shape", "heldout"

    def __init__(self, seq_len: int = 49, input_dim: int = 16, eval_size: int = 256):
        self.spec = TaskSpec(seq_len=seq_len, num_classes=10, input_dim=input_dim)
        self.eval_size = eval_size

    def _draw(self, n: int, gen: torch.Generator) -> Batch:
        x = torch.randn(n, self.spec.seq_len, self.spec.input_dim, generator=gen)
        return Batch(x, torch.randint(0, 10, (n, 1), generator=gen))

    def train_batch(self, step: int, batch_size: int, seed: int) -> Batch:
        """A fresh batch of `batch_size`, the same for the same (seed, step)."""
        return self._draw(batch_size, step_generator(seed, step))

    def eval_batches(self, batch_size: int, split: str | None = None) -> Iterator[Batch]:
        """The fixed held-out examples (seed 1), `batch_size` at a time; `split` is ignored."""
        held = self._draw(self.eval_size, torch.Generator().manual_seed(1))
        for start in range(0, self.eval_size, batch_size):
            yield held.slice(start, start + batch_size)


def make_task(kind: str) -> Task:
    """The task of a configuration's kind: bit-memory, mnist-shape, scale-shape or listops (generated)."""
    from fpt.tasks import create_task

    if kind == "bit-memory":
        return create_task("bit-memory", eval_size=256)  # 1000 bits, 5 strings, patch 50: 120 tokens
    if kind == "mnist-shape":
        return RandomPatches()
    if kind == "scale-shape":
        return RandomPatches(seq_len=64, eval_size=16)
    if kind == "listops":
        from fpt.data.listops import generate_listops
        from fpt.data.lra_tsv import write_listops_tsv

        folder = Path(tempfile.mkdtemp(prefix="fpt-perf-listops-"))
        for split, (sources, labels) in generate_listops(2048, 64, 8, seed=0).items():
            write_listops_tsv(folder / f"basic_{split}.tsv", sources, labels)
        return create_task("listops", data_dir=str(folder))  # real LRA lengths, 500 to 2000 tokens
    raise ValueError(kind)


# --- the peer: the loop a user writes without fpt -----------------------------------------------


class PeerModel(nn.Module):
    """A Hugging Face body between a linear input layer and a linear output layer."""

    def __init__(self, body: nn.Module, spec: TaskSpec, hidden: int, dropout: float = 0.1):
        super().__init__()
        self.body, self.spec = body, spec
        if spec.vocab_size is not None:
            self.inp = nn.Embedding(spec.vocab_size, hidden)
            nn.init.normal_(self.inp.weight, std=0.02)
        else:
            self.inp = nn.Linear(spec.input_dim, hidden)
            nn.init.orthogonal_(self.inp.weight, gain=1.41)
            nn.init.zeros_(self.inp.bias)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(hidden, spec.outputs_per_token * spec.num_classes)

    def forward(self, x, mask=None):
        """Inputs (B, L) or (B, L, input_dim) and a (B, L) mask -> logits (B, num_outputs, num_classes)."""
        h = self.body(
            inputs_embeds=self.drop(self.inp(x)), attention_mask=None if mask is None else mask.long()
        ).last_hidden_state
        if mask is None:
            h = h[:, -self.spec.last_k :]
        else:
            ends = mask.sum(1, keepdim=True)
            h = h.gather(1, (ends - 1).unsqueeze(-1).expand(-1, -1, h.shape[-1]))
        return self.out(h).reshape(len(x), self.spec.num_outputs, self.spec.num_classes)


def build_peer(cfg: dict, task: Task, seed: int) -> nn.Module:
    """The peer model of configuration `cfg`: its body loaded with transformers, dropout 0.1, every linear
    map frozen, between a fresh input layer and head."""
    from transformers import AutoModel, AutoModelForCausalLM, GPT2Config, GPT2Model

    from fpt.backbones import require_backbone_entry
    from fpt.backbones.surgery import extend_positions

    name = cfg["backbone"]
    # a configured rate for the dropout on attention probabilities, set as a user of transformers would
    own_attention_rate = "attention_dropout" in cfg
    extra = {"attention_probs_dropout_prob": cfg["attention_dropout"]} if own_attention_rate else {}
    if name == "gpt2":
        torch.manual_seed(seed)
        body = GPT2Model(GPT2Config())
    elif name == "smollm2-135m":
        full = AutoModelForCausalLM.from_pretrained(require_backbone_entry(name).locate(), dtype=torch.float32)
        body = full.model  # the LM head (tied to the token table) stays loaded, unused
        body._keep_alive = [full.lm_head]
    else:
        body = AutoModel.from_pretrained(require_backbone_entry(name).locate(), dtype=torch.float32, **extra)
    if task.spec.seq_len > body.config.max_position_embeddings:  # ListOps on MiniLM: 2000 positions
        extend_positions(body, body.config.model_type, task.spec.seq_len)
    for module_name, module in body.named_modules():  # the paper's dropout 0.1 everywhere, as fpt does
        if isinstance(module, nn.Dropout) and not (
            own_attention_rate and module_name.endswith("attention.self.dropout")
        ):
            module.p = 0.1
    for key in ("attention_probs_dropout_prob", "attn_pdrop", "attention_dropout"):
        if hasattr(body.config, key) and not own_attention_rate:
            setattr(body.config, key, 0.1)
    for module in body.modules():  # freeze attention and feed-forward: every linear map in the body
        if isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D":
            module.requires_grad_(False)
    torch.manual_seed(seed)
    return PeerModel(body, task.spec, body.config.hidden_size)


# --- measuring ------------------------------------------------------------------------------------


def rss_mib() -> float:
    """Peak resident memory of this process (VmHWM: unlike ru_maxrss, not inherited across exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # pragma: no cover - not Linux


def current_rss_mib() -> float:
    """Resident memory now (not the peak): shows what stays after loading."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def pad_to(batch: Batch, width: int) -> Batch:
    """`batch` right-padded with zeros (and a mask) to `width` tokens: the peer's fixed-length ListOps."""
    extra = width - batch.x.shape[1]
    mask = batch.mask if batch.mask is not None else torch.ones(batch.x.shape[:2], dtype=torch.bool)
    return Batch(F.pad(batch.x, (0, extra)), batch.y, F.pad(mask, (0, extra)))


def worker(name: str, variant: str, steps: int, warmup: int, seed: int) -> dict:
    """One (configuration, variant) in this process: build, `steps` timed training steps (the first
    `warmup` left out of the timings), an evaluation; the result row with its losses and memory."""
    from fpt.backbones import load_backbone
    from fpt.models.transformer import FrozenPretrainedTransformer
    from fpt.tasks.bucketing import LengthBucketedTask
    from fpt.training.config import TrainConfig
    from fpt.training.evaluation import evaluate, predict
    from fpt.training.loop import Trainer

    cfg = CONFIGS[name]
    torch.manual_seed(seed)
    task = make_task(cfg["task"])
    batch_size = cfg["batch"]
    rss_before = rss_mib()
    started = time.perf_counter()
    options = set(variant.split("+")[1:])
    if variant.startswith("peer"):
        model = build_peer(cfg, task, seed)
        if "ckpt" in options:  # what a user of transformers would switch on
            model.body.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.Adam(params, lr=1e-3)
        body = model.body

        def step_fn(batch: Batch) -> float:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(batch.x, batch.mask).reshape(-1, task.spec.num_classes), batch.y.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            return loss.item()

        def eval_fn(batch_size: int) -> int:
            model.eval()
            tokens = 0
            with torch.no_grad():
                for batch in task.eval_batches(batch_size):
                    batch = pad_to(batch, task.spec.seq_len) if variant.startswith("peer-pad2000") else batch
                    model(batch.x, batch.mask)
                    tokens += batch.x.shape[0] * batch.x.shape[1]
            model.train()
            return tokens
    else:
        config = TrainConfig(
            task="bit-memory",
            backbone=cfg["backbone"],
            init=cfg["init"],
            seed=seed,
            batch_size=batch_size,
            precision="bf16" if "bf16" in options else "fp32",
            checkpointing="ckpt" in options,
            compile="compile" in options,
            attention_dropout=cfg.get("attention_dropout"),
            bucket_window=8 if "bucket" in options else None,
        )
        if "bucket" in options:
            task = LengthBucketedTask(task, config.bucket_window)
        backbone = load_backbone(
            config.backbone,
            init=config.init,
            seed=seed,
            seq_len=task.spec.seq_len,
            dropout=config.dropout,
            attention_dropout=config.attention_dropout,
            checkpointing=config.checkpointing,
            compile=config.compile,
        )
        torch.manual_seed(seed)
        model = FrozenPretrainedTransformer(backbone, task.spec, dropout=config.dropout, precision=config.precision)
        trainer = Trainer(model, task, config, progress=False)
        body = model.backbone

        def step_fn(batch: Batch) -> float:
            return trainer.train_step(batch)[0]

        def eval_fn(batch_size: int) -> int:
            evaluate(model, task, batch_size)
            return eval_tokens[batch_size]

        eval_tokens = {bs: sum(b.x.shape[0] * b.x.shape[1] for b in task.eval_batches(bs)) for bs in (8, 64)}
    build_s = time.perf_counter() - started
    rss_after_build = current_rss_mib()
    model.train()
    losses, times, tokens, examples = [], [], [], []
    for step in range(steps):
        batch = task.train_batch(step, batch_size, seed)
        if variant.startswith("peer-pad2000"):
            batch = pad_to(batch, task.spec.seq_len)
        t = time.perf_counter()
        losses.append(step_fn(batch))
        times.append(time.perf_counter() - t)
        tokens.append(batch.x.shape[0] * batch.x.shape[1])
        examples.append(batch.x.shape[0])
    train_rss = rss_mib()
    timed = slice(warmup, steps)
    step_s = statistics.median(times[timed])
    seq_len = sum(tokens[timed]) / sum(examples[timed])
    train_flops, params = flops_per_token(body, seq_len, train=True)
    eval_flops, _ = flops_per_token(body, seq_len, train=False)
    result = {
        "config": name,
        "variant": variant,
        "batch": batch_size,
        "steps": steps,
        "warmup": warmup,
        "tokens_per_step": sum(tokens[timed]) / len(times[timed]),
        "step_s_median": step_s,
        "train_tokens_per_s": sum(tokens[timed]) / sum(times[timed]),
        "train_examples_per_s": sum(examples[timed]) / sum(times[timed]),
        "train_flops_per_s": train_flops * sum(tokens[timed]) / sum(times[timed]),
        "matmul_weights": params,  # the body's weight-matrix entries (older results: non_embedding_params)
        "losses": losses,
        "build_s": build_s,
        "rss_before_build_mib": rss_before,
        "rss_after_build_mib": rss_after_build,
        "rss_after_train_mib": current_rss_mib(),
        "train_peak_rss_mib": train_rss,
    }
    if name != "gpt2-xl-scale":
        eval_bs = 64 if name != "listops" else 8
        eval_fn(eval_bs)  # warm-up (and compile, where asked)
        t = time.perf_counter()
        eval_tokens = eval_fn(eval_bs)
        result["eval_tokens_per_s"] = eval_tokens / (time.perf_counter() - t)
        result["eval_flops_per_s"] = eval_flops * result["eval_tokens_per_s"]
    if name == "listops" and "bucket" in options:  # identical results per example vs padding to 2000
        plain = make_task("listops")
        with torch.inference_mode():
            model.eval()
            padded = torch.cat(
                [
                    model(pad_to(b, task.spec.seq_len).x, pad_to(b, task.spec.seq_len).mask)
                    for b in plain.eval_batches(8)
                ]
            )
        bucketed = predict(model, task, 8)
        result["per_example_max_abs_diff"] = (bucketed - padded).abs().max().item()
        result["per_example_same_prediction"] = bool(torch.equal(bucketed.argmax(-1), padded.argmax(-1)))
    result["peak_rss_mib"] = rss_mib()
    return result


def run_one(name: str, variant: str, steps: int, warmup: int, seed: int) -> dict:
    """`worker` in a process of its own (its peak memory its own); a row with "error" if it failed."""
    command = [sys.executable, __file__, "--worker", name, variant, str(steps), str(warmup), str(seed)]
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"config": name, "variant": variant, "error": tail}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(rows: list[dict], peak: float, peak_bf16: float) -> str:
    """MFU is against the fp32 matmul peak; for bf16 variants also against the bf16 peak."""
    lines = [
        "| config | variant | step ms (median) | train tok/s | MFU | eval tok/s | train peak RSS MiB | "
        "x peer (train) | x peer (RSS) | max |loss diff| vs peer (20 steps) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    peers = {r["config"]: r for r in rows if r["variant"].startswith("peer") and "error" not in r}
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['config']} | {r['variant']} | error: {r['error'][:80]} | | | | | | | |")
            continue
        p = peers.get(r["config"])
        speed_key = "train_examples_per_s" if r["config"] == "listops" else "train_tokens_per_s"
        ratio = f"{r[speed_key] / p[speed_key]:.2f}" if p else ""
        mem = f"{r['train_peak_rss_mib'] / p['train_peak_rss_mib']:.2f}" if p else ""
        diff = (
            f"{max(abs(a - b) for a, b in zip(r['losses'], p['losses'])):.1e}" if p and r["config"] != "listops" else ""
        )
        mfu = f"{r['train_flops_per_s'] / peak:.0%}"
        if "bf16" in r["variant"]:
            mfu += f" ({r['train_flops_per_s'] / peak_bf16:.0%} of bf16)"
        lines.append(
            f"| {r['config']} | {r['variant']} | {1000 * r['step_s_median']:.0f} | "
            f"{r['train_tokens_per_s']:.0f} | {mfu} | "
            f"{r.get('eval_tokens_per_s', 0):.0f} | {r['train_peak_rss_mib']:.0f} | {ratio} | {mem} | {diff} |"
        )
    return "\n".join(lines)


def main() -> None:
    """Measure the peaks, run every asked (configuration, variant), print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(CONFIGS), help="configurations to run (default: all)")
    parser.add_argument("--variants", nargs="+", help="variants to run (default: each configuration's list)")
    parser.add_argument("--steps", type=int, default=20, help="training steps per run (losses compared over these)")
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out of the timings")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        name, variant, steps, warmup, seed = args.worker
        print(json.dumps(worker(name, variant, int(steps), int(warmup), int(seed))), flush=True)
        return

    from fpt.core.runtime import bf16_note, native_bf16

    # Where bf16 is emulated its peak alone took over 13 minutes (AMD EPYC without AVX512-BF16):
    # measure it, and run the bf16 variants, only where the CPU has it natively.
    bf16 = native_bf16() is not False
    peak = matmul_peak()
    peak_bf16 = matmul_peak(dtype=torch.bfloat16) if bf16 else float("nan")
    print(
        f"fp32 matmul peak: {peak / 1e9:.0f} GFLOP/s on {torch.get_num_threads()} threads; "
        f"bf16: {peak_bf16 / 1e9:.0f} GFLOP/s ({bf16_note()})",
        flush=True,
    )
    if not bf16:
        print("bf16 variants skipped: this CPU emulates bfloat16", flush=True)
    names = args.only or list(CONFIGS)
    if "smollm2-mnist" in names:  # convert the GGUF file to the fp32 cache once, outside every timed run
        from fpt.backbones import require_backbone_entry

        require_backbone_entry("smollm2-135m").locate()
    rows = []
    for name in names:
        steps = {"gpt2-xl-scale": min(args.steps, 4), "listops": 16}.get(name, args.steps)
        warmup = {"gpt2-xl-scale": 1, "listops": 0}.get(name, args.warmup)
        for variant in CONFIGS[name]["variants"]:
            if (args.variants and variant not in args.variants) or ("bf16" in variant and not bf16):
                continue
            rows.append(run_one(name, variant, steps, warmup, args.seed))
            r = rows[-1]
            print(
                json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if k != "losses"}),
                flush=True,
            )
    print()
    print(table(rows, peak, peak_bf16))
    # a partial run (--only) gets its own file, so the full run's results are kept
    results = RESULTS if not args.only else RESULTS.with_name(f"perf_{'_'.join(args.only)}.json")
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(
        json.dumps(
            {
                "machine": {
                    "cpu": platform.processor() or platform.machine(),
                    "threads": torch.get_num_threads(),
                    "torch": torch.__version__,
                    "fp32_matmul_peak_flops": peak,
                    "bf16_matmul_peak_flops": peak_bf16,
                },
                "command": " ".join([Path(sys.executable).name, *sys.argv]),
                "flops_convention": CONVENTION,
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"\nwrote {results}")


if __name__ == "__main__":
    main()
