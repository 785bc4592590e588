"""What every table family shares: where the repository and its results lie, the readers of a run's
files, and the number formats and the Markdown of a table. Writes no table itself."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
BENCHMARKS_DIR = ROOT / "benchmarks"
RESULTS = BENCHMARKS_DIR / "results"
HEADLINE = RESULTS / "headline"  # the headline cells' runs (benchmarks/headline.sh)
WORDS = ["none", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def _json(path: Path):
    return json.loads(path.read_text())


def _jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _pct(accuracy: float) -> str:
    return f"{100 * accuracy:.2f}"


def _count(n: int) -> str:
    return WORDS[n] if n < len(WORDS) else str(n)


def _rate(value: float) -> str:
    """1e-3, 3e-3, 3e-05 -> '1e-3', '3e-3', '3e-5'."""
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
