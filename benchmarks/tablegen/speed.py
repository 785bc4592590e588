"""Step time, memory and data parallelism (benchmarks/perf.py, compile_speed.py, memory.py, scale.py):
the `speed`, `speed-listops`, `compile`, `memory` and `data-parallel` tables of benchmarks/speed.md."""

from __future__ import annotations

from .common import BENCHMARKS_DIR, RESULTS, _json, _markdown

# --- speed and memory --------------------------------------------------------------------------

SPEED_CONFIGS = {
    "minilm-bit-memory": "MiniLM, Bit Memory shape",
    "minilm-mnist": "MiniLM, MNIST shape",
    "gpt2-mnist": "GPT-2-small architecture, MNIST shape",
    "smollm2-mnist": "SmolLM2-135M, MNIST shape",
    "gpt2-xl-scale": "GPT-2-XL architecture (1.5B parameters)",
}
SPEED_VARIANTS = {
    "peer": "plain PyTorch loop",
    "fpt": "fpt",
    "fpt+bf16": "fpt `--precision bf16`",
    "fpt+compile": "fpt `--compile`",
    "fpt+ckpt": "fpt `--checkpointing`",
    "fpt+bf16+ckpt": "fpt `--precision bf16 --checkpointing`",
}


def _diff(value: float) -> str:
    return "0" if value == 0 else f"{value:.1e}".replace("e-0", "e-")


def speed_table() -> str:
    """benchmarks/perf.py's results: one statistic, the median step time, and ratios of those medians."""
    perf = _json(RESULTS / "perf.json")
    peak, peak_bf16 = perf["machine"]["fp32_matmul_peak_flops"], perf["machine"]["bf16_matmul_peak_flops"]
    rows = [r for r in perf["rows"] if "error" not in r]
    peers = {r["config"]: r for r in rows if r["variant"] == "peer"}
    lines = []
    for r in rows:
        peer = peers.get(r["config"])
        # FLOPs of one step (perf.py's count per token x tokens), over the median step
        flops = r["train_flops_per_s"] / r["train_tokens_per_s"] * r["tokens_per_step"] / r["step_s_median"]
        mfu = f"{flops / peak_bf16:.0%} of the bf16 peak" if "bf16" in r["variant"] else f"{flops / peak:.0%}"
        shape = f"{r['tokens_per_step'] / r['batch']:.0f} tokens x {r['batch']}"
        ratio = "-" if peer is None else f"{peer['step_s_median'] / r['step_s_median']:.2f}x"
        diff = "-" if peer is None else _diff(max(abs(a - b) for a, b in zip(r["losses"], peer["losses"])))
        lines.append(
            [
                f"{SPEED_CONFIGS.get(r['config'], r['config'])} ({shape})",
                SPEED_VARIANTS.get(r["variant"], r["variant"]),
                f"{1000 * r['step_s_median']:.0f} ms",
                ratio,
                mfu,
                f"{r['train_peak_rss_mib'] / 1024:.1f}",
                diff,
            ]
        )
    return _markdown(
        [
            "configuration",
            "variant",
            "median step",
            "speed-up: plain loop's median / this median",
            "MFU at the median step (of the fp32 peak unless said)",
            "peak memory in training, GiB",
            f"largest loss difference from the plain loop ({rows[0]['steps']} steps)",
        ],
        lines,
    )


LISTOPS_VARIANTS = {
    "peer-pad2000": "plain loop, every sequence padded to 2000",
    "fpt": "fpt, each batch cut to its longest sequence",
    "fpt+bucket": "fpt `--bucket-window 8` (similar lengths batched together)",
}


def speed_listops_table() -> str:
    """perf.py --only listops: the mean step (lengths vary from batch to batch, so a mean is the throughput)."""
    perf = _json(RESULTS / "perf_listops.json")
    rows = [r for r in perf["rows"] if "error" not in r]
    peer = next(r for r in rows if r["variant"].startswith("peer"))
    mean = {r["variant"]: r["batch"] / r["train_examples_per_s"] for r in rows}
    lines = [
        [
            LISTOPS_VARIANTS.get(r["variant"], r["variant"]),
            f"{mean[r['variant']]:.1f} s",
            f"{r['train_examples_per_s']:.2f}",
            f"{mean[peer['variant']] / mean[r['variant']]:.2f}x",
            f"{r['train_peak_rss_mib'] / 1024:.1f}",
        ]
        for r in rows
    ]
    return _markdown(
        [
            "variant",
            f"mean step ({rows[0]['steps']} steps)",
            "examples/s",
            "speed-up: padded mean step / this mean step",
            "peak memory, GiB",
        ],
        lines,
    )


def compile_table() -> str:
    """compile_speed.py's table, from the rows of its JSON (the script formats it; loaded by path, as
    benchmarks/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("compile_speed", BENCHMARKS_DIR / "compile_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.table(module.summarise(_json(RESULTS / "compile" / "compile_speed.json")["rows"]))


MEMORY_ORDER = [
    "bit-xor",
    "bit-memory",
    "mnist",
    "fashion-mnist",
    "cifar10",
    "ucr",
    "cifar10-lra",
    "remote-homology",
    "listops",
]


def memory_table() -> str:
    memory = _json(RESULTS / "memory.json")
    rows = sorted(memory["rows"], key=lambda r: MEMORY_ORDER.index(r["task"]) if r["task"] in MEMORY_ORDER else 99)
    lines = [
        [
            r["task"] + (" (GunPoint)" if r["task"] == "ucr" else ""),
            str(r["tokens"]),
            "on (auto)" if r["checkpointing"] else "off",
            str(r["micro_batch"]) if r["micro_batch"] else "- (not split)",
            f"{r['peak_gb']:.2f}",
        ]
        for r in rows
    ]
    return _markdown(["task", "tokens", "checkpointing", "micro-batch", "peak GiB"], lines)


def data_parallel_table() -> str:
    scale = _json(RESULTS / "scale.json")
    one, two = scale["one_process"], scale["2_ranks"]
    return _markdown(
        ["", "step", "examples/s"],
        [
            [
                f"one process, {one['threads']} threads",
                f"{1000 * one['step_s']:.1f} ms",
                f"{one['examples_per_s']:.0f}",
            ],
            [
                f"2 ranks (gloo), {two['threads_each']} thread each",
                f"{1000 * two['step_s']:.1f} ms",
                f"{two['examples_per_s']:.0f}",
            ],
        ],
    )


def startup_table() -> str:
    """How soon `fpt` answers (benchmarks/startup.py): each machine's medians in seconds against a bare
    `import torch` in the same sitting, with the load average it began at."""
    rows = []
    for path in sorted((RESULTS / "startup").glob("*.json")):
        record = _json(path)
        median = record["median_s"]
        rows.append(
            [
                f"{record['cpu_model']}, {record['usable_cores']} cores (`{path.name}`)",
                f"{record['load_average_before'][0]:.2f}",
                f"{median['import_torch']:.2f}",
                f"{median['fpt_help']:.2f} ({record['fpt_help_over_import_torch']:.0%})",
                f"{median['fpt_backbones']:.2f}",
                f"{median['fpt_info']:.2f} ({median['fpt_info'] / median['import_torch']:.0%})",
                f"{median['train_to_first_step_s']:.2f}",
            ]
        )
    header = [
        "machine",
        "load",
        "import torch",
        "fpt --help (of import torch)",
        "fpt backbones",
        "fpt info (of import torch)",
    ]
    return _markdown([*header, "fpt train to its first step"], rows) + "\n"
