"""ETTh2's DLinear recipe, chosen on validation alone: each candidate's validation MSE per horizon.

Reads selection/<candidate>/ETTh2-h<H>/summary.json (seed 0) and, for candidate E (ETTh1's recipe,
already run), ../linear/ETTh2-h<H>-seed0; writes selection.md. The validation MSE is the one the
run ends with (for --keep-best runs, its best evaluation's). Test is not read here.

    python benchmarks/results/forecasting/linear_etth2/selection_table.py
"""

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
HORIZONS = (96, 192, 336, 720)
ETTH1_RECIPE = "E_b32_cos4000"


def runs() -> dict[str, dict[int, Path]]:
    """Each candidate's run folder per horizon."""
    found = {ETTH1_RECIPE: {h: HERE.parent / "linear" / f"ETTh2-h{h}-seed0" for h in HORIZONS}}
    for folder in sorted((HERE / "selection").iterdir()):
        found[folder.name] = {h: folder / f"ETTh2-h{h}" for h in HORIZONS}
    return found


def describe(run: Path) -> str:
    """The recipe in fpt's options."""
    c = json.loads((run / "config.json").read_text())
    clip = "none" if c["grad_clip"] >= 1e5 else f"{c['grad_clip']:g}"
    best = f", keep-best patience {c['patience']}" if c.get("keep_best") else ""
    return (
        f"batch {c['batch_size']}, lr {c['lr']:g} {c['lr_schedule']}, {c['steps']} steps "
        f"(eval every {c['eval_every']}), clip {clip}{best}"
    )


def main() -> None:
    """Write selection.md: validation MSE per horizon, the four-horizon mean, the choice."""
    rows, means = [], {}
    for name, by_h in runs().items():
        vals = {}
        for h, run in by_h.items():
            if (run / "summary.json").exists():
                vals[h] = json.loads((run / "summary.json").read_text())["final"]["mse"]
        recipe = describe(next(r for r in by_h.values() if (r / "config.json").exists()))
        if len(vals) == len(HORIZONS):
            means[name] = statistics.mean(vals.values())
        cells = [f"{vals[h]:.4f}" if h in vals else "-" for h in HORIZONS]
        rows.append((name, recipe, cells, means.get(name)))
    chosen = min(means, key=means.get)
    lines = [
        "| candidate | recipe | " + " | ".join(f"val H={h}" for h in HORIZONS) + " | mean |",
        "|---|---|" + "---|" * (len(HORIZONS) + 1),
    ]
    for name, recipe, cells, mean in rows:
        mark = " **chosen**" if name == chosen else ""
        average = "-" if mean is None else f"{mean:.4f}"
        lines.append(f"| {name}{mark} | {recipe} | " + " | ".join(cells) + f" | {average} |")
    text = (
        "# ETTh2 DLinear recipe, chosen on validation MSE (seed 0)\n\n"
        "Written by selection_table.py; test is not read. Stage 1: every candidate at H=96, seed 0 (as ETTh1's\n"
        "selection, linear_selection/; its G, 5,140 steps, left out for time). Stage 2: the three lowest at\n"
        "H=96 and ETTh1's recipe (E, its runs in ../linear/) at all four horizons. Rule, fixed before stage 2:\n"
        "one recipe for every horizon, the lowest mean validation MSE over the four. Batch 224 = DLinear's\n"
        "32 windows x 7 channels; H to L use DLinear's ETTh2 rate (0.05, its scripts/EXP-LongForecasting/\n"
        "DLinear/etth2.sh), fpt's cosine standing in for its halving every epoch (L: the halving's total rate\n"
        "over 10 epochs, 0.1 epoch-units, as a cosine over 4 epochs).\n\n"
        + "\n".join(lines)
        + f"\n\nChosen: {chosen} (mean validation MSE {means[chosen]:.4f}).\n"
    )
    (HERE / "selection.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
