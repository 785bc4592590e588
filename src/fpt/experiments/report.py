"""`fpt report DIR`: one self-contained HTML page for a run or a sweep; and `fpt sweep`'s own
results.md with its chart and learning curves (`write_sweep_report`).

Everything is inline (CSS, figures as data URIs), so the page can be mailed or attached as it is.
A run shows its configuration, its results on every split, its learning curve, and the attention
maps and confusion matrices found in its directory; a sweep (or `fpt reproduce`'s folder) shows
its tables beside the paper's numbers with their charts, its learning curves and its runs.
"""

from __future__ import annotations

import base64
import csv
import html
import re
from pathlib import Path

from fpt.core.errors import FptError
from fpt.core.paths import write_text
from fpt.core.scores import is_regression
from fpt.experiments.sweep_spec import SweepSpec
from fpt.training.run_dir import RunDir

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1.5em; max-width: 70em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
h3 { font-size: 1em; } .scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }
th { background: #f3f3f3; } img { max-width: 100%; margin: 0.4em 0; border: 1px solid #eee; }
.figures { display: flex; flex-wrap: wrap; gap: 1em; } .figures figure { margin: 0; max-width: 32em; }
"""


def _image(path: Path, caption: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return (
        f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def _table(header: list[str], rows: list[list], table_id: str = "") -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    attribute = f' id="{table_id}"' if table_id else ""
    # wide tables (a sweep's runs) scroll sideways inside the page instead of running off it
    return f'<div class="scroll"><table{attribute}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)]+)\)")


def _markdown(text: str, folder: Path) -> str:
    """A results.md as HTML: its headings, pipe tables (the first has id "results"), lines of text,
    and the charts it references, inlined (only files beside it)."""
    parts: list[str] = []
    pipes: list[str] = []

    def end_table() -> None:
        if len(pipes) >= 2:
            cells = [[c.strip() for c in line.strip("|").split("|")] for line in pipes]
            tables = sum("<table" in part for part in parts)
            parts.append(_table(cells[0], cells[2:], "results" if not tables else f"results-{tables + 1}"))
        pipes.clear()

    for line in text.splitlines():
        if line.startswith("|"):
            pipes.append(line)
            continue
        end_table()
        image = _IMAGE.fullmatch(line.strip())
        if line.startswith("#"):
            parts.append(f"<h3>{html.escape(line.lstrip('# '))}</h3>")
        elif image and Path(image.group(2)).name == image.group(2) and (folder / image.group(2)).is_file():
            parts.append(_image(folder / image.group(2), image.group(1)))
        elif line.strip():
            parts.append(f"<p>{html.escape(line)}</p>")
    end_table()
    return "".join(parts)


def _page(title: str, sections: list[str]) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>{''.join(sections)}</body></html>"
    )


def _readable(value) -> str:
    """A config value as a reader would write it: no Python reprs (None, dicts, lists) on the page.
    An option left unset takes its default behaviour (e.g. attention as pretrained)."""
    if value is None:
        return "default"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{key}={_readable(item)}" for key, item in value.items()) or "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(_readable(item) for item in value) or "none"
    return str(value)


def _older_than_summary(evaluation: dict, summary: dict) -> bool:
    """An `fpt evaluate` of a step before the one the run finished at (made while it trained)."""
    step = evaluation.get("step")
    return bool(summary) and isinstance(step, int) and not isinstance(step, bool) and step < summary["step"]


def _results_section(splits: dict, summary: dict) -> str:
    """Each scored split, first on the page: accuracy, or a forecast's MSE and MAE (and a collection's sMAPE,
    MASE and OWA in its series' units); a forecast's test split as scored when the run ended."""
    if any(is_regression(r) for r in splits.values()):
        splits = {**splits, **{n: r for n, r in (summary.get("test") or {}).items() if n not in splits}}
        series = any("smape" in r for r in splits.values())
        header = ["split", "MSE", "MAE", *(["sMAPE", "MASE", "OWA"] if series else []), "examples"]
        rows = [
            [name, f"{r['mse']:.4f}", f"{r['mae']:.4f}"]
            + (
                [f"{r['smape']:.2f}", f"{r['mase']:.3f}", "-" if r.get("owa") is None else f"{r['owa']:.3f}"]
                if series
                else []
            )
            + [f"{r['examples']:,}"]
            for name, r in splits.items()
        ]
        return "<h2>Results</h2>" + _table(header, rows, "results")
    rows = [[n, f"{100 * r['accuracy']:.2f}%", f"{r['loss']:.4f}", f"{r['examples']:,}"] for n, r in splits.items()]
    return "<h2>Results</h2>" + _table(["split", "accuracy", "loss", "examples"], rows, "results")


def _baselines_section(summary: dict) -> str:
    """The reference methods on the same test split and the sentence on who wins; a collection's intervals."""
    from fpt.training.intervals import coverage_line
    from fpt.training.reference_scores import baseline_rows, verdict

    parts = []
    if summary.get("baselines"):
        rows = [list(row) for row in baseline_rows(summary)]
        rows += [["left out", reason] for reason in summary["baselines"].get("missing", [])]
        sentence = f"<h2>Beside the baselines</h2><p>{html.escape(verdict(summary))}.</p>"
        parts.append(sentence + _table(["method", "score"], rows))
    if "intervals" in summary:
        parts.append(f"<p>{html.escape(coverage_line(summary['intervals']))}.</p>")
    return "".join(parts)


def _facts_section(config: dict, summary: dict) -> str:
    facts = [
        ["steps", summary["step"]],
        ["trained parameters", f"{summary['trained_params']:,}"],
        ["all parameters", f"{summary['total_params']:,}"],
        ["wall time (s)", summary["wall_time_s"]],
    ]
    if "best_step" in summary:  # --keep-best: which weights the result and the test score are of
        facts.append(["weights kept (--keep-best)", f"the best evaluation's, at step {summary['best_step']:,}"])
    if config.get("target_accuracy") is not None or config.get("target_mse") is not None:
        reached = summary.get("target_reached_at_step")
        facts.append(["target reached", "not reached" if reached is None else f"at step {reached:,}"])
    return _table(["run", ""], facts, "summary")


def _config_section(config: dict) -> str:
    """Only the options that differ from TrainConfig's defaults (the task and its options always)."""
    import dataclasses

    from fpt.training.config import TrainConfig

    defaults = dataclasses.asdict(TrainConfig())
    shown = {k: v for k, v in config.items() if k in ("task", "task_options") or defaults.get(k, object()) != v}
    options = [[key, _readable(value)] for key, value in sorted(shown.items())]
    return "<h2>Options that differ from the defaults</h2>" + _table(["option", "value"], options, "config")


def _run_sections(run_dir: Path) -> tuple[str, list[str]]:
    from fpt.experiments.plots import learning_curves
    from fpt.training.config import TrainConfig

    run = RunDir.existing(run_dir)
    config, summary = run.read_config(), run.read_summary() or {}
    checked = TrainConfig.from_dict(config, where=str(run.config_path))  # a damaged file: one line
    title = (
        f"fpt run: {checked.task} on {checked.backbone} "
        f"(policy {checked.policy}, init {checked.init}, lr {checked.lr:g})"
    )
    evaluation = run.read_evaluation() or {}
    stale = _older_than_summary(evaluation, summary)
    splits = {} if stale else evaluation.get("splits") or {}
    final = summary.get("final")
    if final and final["split"] not in splits:  # `fpt evaluate --splits test` left the watched split out
        splits = {final["split"]: final, **splits}
    sections = [_results_section(splits, summary), _baselines_section(summary)]
    if stale:
        sections.append(
            f"<p class='note'>{html.escape(RunDir.EVALUATION)} scored step {evaluation['step']:,}, before the run "
            f"ended at step {summary['step']:,}; it is left out: run <code>fpt evaluate</code> again.</p>"
        )
    if summary:
        sections.append(_facts_section(config, summary))
    figures = []
    curve = run_dir / "curve.png"
    row = {"task": checked.task, "status": "done", "run_dir": str(run_dir), "variant": run_dir.name}
    if learning_curves([row], curve):
        metric = "MSE" if any(is_regression(r) for r in splits.values()) else "accuracy"
        figures.append(_image(curve, f"{metric} during training, on the split watched then"))
    confusions = [] if stale else sorted(run_dir.glob("confusion_*.png"))  # drawn by that stale evaluation
    pictures = sorted(run_dir.glob("attention_layer*.png")) + confusions + sorted(run_dir.glob("forecast_*.png"))
    for png in pictures + sorted(run_dir.glob("predictions-*.png")):
        figures.append(_image(png, png.stem.replace("_", " ")))
    sections.append("<h2>Figures</h2><div class='figures'>" + "".join(figures) + "</div>")
    sections.append(_config_section(config))
    return title, sections


def _sweep_sections(sweep_dir: Path) -> tuple[str, list[str]]:
    from fpt.core.jsonfile import read_json_object

    spec = read_json_object(sweep_dir / "spec.json", "fpt sweep") if (sweep_dir / "spec.json").exists() else {}
    title = f"fpt sweep: {spec.get('name', sweep_dir.name)}"
    sections = []
    if spec:
        grid, options = spec.get("grid"), spec.get("options")
        if not (
            isinstance(grid, dict)
            and isinstance(options, dict)
            and all(isinstance(values, list) for values in grid.values())
        ):
            raise FptError(
                f"{sweep_dir / 'spec.json'} is not a sweep's spec (grid and options); "
                "run `fpt sweep SPEC --out DIR` again to rewrite it"
            )
        rows = (
            [[f"grid: {key}", ", ".join(map(str, values))] for key, values in grid.items()]
            + [[key, value] for key, value in options.items()]
            + [["runs at once", spec.get("parallel", 1)]]
        )
        sections.append("<h2>Configuration</h2>" + _table(["setting", "value"], rows, "config"))
    if (sweep_dir / "results.md").exists():
        sections.append("<h2>Results</h2>" + _markdown((sweep_dir / "results.md").read_text(), sweep_dir))
    with open(sweep_dir / "results.csv") as handle:
        rows = list(csv.DictReader(handle))
    if (sweep_dir / "curves.png").exists():
        metric = "accuracy (MSE for a forecast)" if any(r.get("mse") for r in rows) else "accuracy"
        sections.append(
            "<h2>Learning curves</h2>"
            + _image(sweep_dir / "curves.png", f"{metric} on the split watched during training, against step")
        )
    if rows:
        columns = [c for c in rows[0] if c not in ("run_dir", "row")]
        sections.append("<h2>Runs</h2>" + _table(columns, [[r[c] for c in columns] for r in rows], "runs"))
    attention = sorted(sweep_dir.glob("**/runs/*/attention_layer*.png"))
    if attention:
        sections.append(
            "<h2>Attention maps</h2><div class='figures'>"
            + "".join(_image(p, f"{p.parent.name}: {p.stem}") for p in attention)
            + "</div>"
        )
    return title, sections


def write_report(directory: Path, out: Path | None = None) -> Path:
    """Write DIR/report.html (or `out`) for a run directory or a sweep directory."""
    directory = Path(directory)
    if (directory / "results.csv").is_file():
        title, sections = _sweep_sections(directory)
    elif (directory / RunDir.CONFIG).is_file():
        title, sections = _run_sections(directory)
    else:
        raise FptError(f"{directory} is neither a run directory (config.json) nor a sweep directory (results.csv)")
    return write_text(out or directory / "report.html", _page(title, sections))


def write_sweep_report(rows: list[dict], spec: SweepSpec, sweep_dir: Path) -> str:
    """results.md (the table of a user's own sweep), chart.png and curves.png; returns the table's text."""
    from fpt.experiments.plots import learning_curves, table_chart
    from fpt.experiments.tables import (
        failed_runs_section,
        markdown_table,
        row_metric,
        split_title,
        stopped_runs_section,
    )

    options = ", ".join(f"{k}={v}" for k, v in spec.options.items())
    seeds = len({str(cell.values.get("seed", 0)) for cell in spec.cells()})
    text = markdown_table(rows, f"{spec.name}: {options}; {seeds} seed(s); {split_title(rows)}", None, "row")
    if table_chart(rows, sweep_dir / "chart.png", f"{spec.name}: {split_title(rows)}", None, "row"):
        scored = "MSE" if all(row_metric(r) == "mse" for r in rows if r["status"] == "done") else "accuracy"
        text += f"\n![our {scored} by row and task](chart.png)\n"
    text += failed_runs_section(rows) + stopped_runs_section(rows)
    write_text(sweep_dir / "results.md", text)
    learning_curves(rows, sweep_dir / "curves.png", "row")
    return text
