"""A sweep's spec: the YAML file (read with one-line errors for every mistake, a key given twice
included), its grid of cells, and each cell's `fpt train` options; see fpt.experiments.sweep.

A grid's `variant` names a bundle of options (`random`: policy fpt, init random); the bundles are
given by whoever reads the spec (`Variants`: `fpt sweep` and `fpt reproduce` give the paper's,
fpt.experiments.paper.PAPER_VARIANTS), never looked up here, so the engine knows nothing of the paper."""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import hashlib
import itertools
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from fpt.core.errors import FptError, quoted, require
from fpt.training.config import coerce_option

SPEC_KEYS = {"name", "grid", "cells", "options", "parallel", "runs", "max_minutes"}
# Bounds that keep a hostile or mistyped spec from running for ever or filling the memory.
MAX_SPEC_BYTES = 1 << 20
MAX_CELLS = 10_000
MAX_PARALLEL = 256
# Keys that tell a sweep's cells apart: in a spec's grid (or a reproduction's tables), not its options.
GRID_ONLY_KEYS = ("task", "variant", "seed")


@dataclass(frozen=True)
class Variants:
    """What a cell's `variant` value stands for: a bundle of `fpt train` options per name, and the
    options a variant takes on one task only ((variant, task) -> options). Given to `load_spec` and
    kept by the SweepSpec; the engine has none of its own (NO_VARIANTS: a grid may name no variant)."""

    bundles: Mapping[str, Mapping] = field(default_factory=dict)
    per_task: Mapping[tuple[str, str], Mapping] = field(default_factory=dict)


NO_VARIANTS = Variants()


def option_names() -> set[str]:
    """Every key a spec's grid or options may use: `fpt train` options, task options, variant."""
    from fpt.tasks import TASK_OPTIONS
    from fpt.training.config import TrainConfig

    return ({f.name for f in dataclasses.fields(TrainConfig)} - {"task_options"}) | set(TASK_OPTIONS) | {"variant"}


_PLAIN_VALUE = re.compile(r"[A-Za-z0-9._+*-]*")  # no "=" or ",", which separate the name's parts
_MAX_NAME = 120  # a directory name stays far below the usual 255-byte limit
_CELL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=,-]*")  # a `cells:` name: a directory name, never a path


@dataclass
class Cell:
    """One run of the sweep: its values, its directory name and the folder that directory is in."""

    values: dict
    given_name: str | None = None  # a `cells:` spec's name for it, used as it is
    runs: str | None = None  # the spec's `runs` folder; None: SWEEP_DIR/runs

    @property
    def name(self) -> str:
        """The name the spec gave it; else KEY=VALUE,... where every value is plain text; otherwise
        that text made safe and cut, plus a hash of the values, so two cells never share a directory
        (npz:/d/a/b and npz:/d/a_b did)."""
        if self.given_name is not None:
            return self.given_name
        text = ",".join(f"{k}={v}" for k, v in self.values.items())
        if all(_PLAIN_VALUE.fullmatch(str(v)) for v in self.values.values()) and len(text) <= _MAX_NAME:
            return text
        digest = hashlib.sha1(json.dumps(self.values, sort_keys=True, default=str).encode()).hexdigest()[:10]
        return re.sub(r"[^A-Za-z0-9=,._+*-]", "_", text)[:_MAX_NAME] + "~" + digest


@dataclass
class SweepSpec:
    """A loaded spec: its cells (a grid's product, or named ones), the options they share, how many
    run at once, where their run directories go and how long each may train per sitting."""

    name: str
    grid: dict[str, list]
    options: dict
    parallel: int = 1
    named_cells: dict[str, dict] | None = None  # `cells:` (name -> values), in place of a grid
    runs: str | None = None  # `runs:`, resolved: the folder of the cells' run directories
    max_minutes: float | None = None  # `max_minutes:`: each cell's `fpt train --max-minutes` per sitting
    variants: Variants = NO_VARIANTS  # what the grid's `variant` values stand for, given by the caller

    def as_dict(self) -> dict:
        """The spec as spec.json records it: a grid spec's keys as they always were, the newer keys
        only where given (the variants' bundles are not the spec's: each cell's record has its options)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "variants"}
        return {k: v for k, v in data.items() if k in ("name", "grid", "options", "parallel") or v is not None}

    def cell_options(self, values: dict) -> dict:
        """The `fpt train` options of the cell with these grid values (`cell_options`)."""
        return cell_options(self.options, values, self.variants)

    def cells(self) -> list[Cell]:
        """Every cell, in the spec's order; a cell given twice is refused."""
        if self.named_cells is not None:
            return [Cell(dict(values), name, self.runs) for name, values in self.named_cells.items()]
        keys = list(self.grid)
        cells = [
            Cell(dict(zip(keys, values)), runs=self.runs) for values in itertools.product(*(self.grid[k] for k in keys))
        ]
        seen: dict[str, Cell] = {}
        for cell in cells:
            if cell.name in seen:
                raise FptError(
                    f"sweep {self.name!r} has the cell {quoted(cell.values)} twice; list each grid value once"
                )
            seen[cell.name] = cell
        return cells


def _line_of(node, key: str) -> int:
    """1-based line of `key` in a YAML mapping node, for error messages."""
    for key_node, _ in getattr(node, "value", []):
        if getattr(key_node, "value", None) == key:
            return key_node.start_mark.line + 1
    return node.start_mark.line + 1


def _check_value(key: str, value, where: str, variants: Variants) -> None:
    from fpt.tasks import list_tasks

    if key == "variant" and value not in variants.bundles:
        if not variants.bundles:
            raise FptError(f"{where}: this sweep takes no variant; give the options themselves (e.g. policy: fpt)")
        raise FptError(f"{where}: unknown variant {quoted(value)}; choose from {', '.join(variants.bundles)}")
    if key == "task" and str(value).partition(":")[0] not in list_tasks():  # npz:PATH, forecast:PATH, ett:ETTh1
        raise FptError(f"{where}: unknown task {quoted(value)}; choose from {', '.join(list_tasks())}")


def read_spec_text(path: Path, what: str = "sweep spec") -> str:
    """A short YAML file's text: a missing file, a folder, binary data or megabytes are refused."""
    if not path.exists():
        raise FptError(f"{what} {path} does not exist")
    if not path.is_file():
        raise FptError(f"{what} {path} is not a file; give the path of a YAML file")
    if path.stat().st_size > MAX_SPEC_BYTES:
        raise FptError(
            f"{what} {path} is {path.stat().st_size:,} bytes; it should be a short YAML file "
            f"(at most {MAX_SPEC_BYTES:,})"
        )
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise FptError(f"{what} {path} is not text (UTF-8); give a YAML file") from None


def _yaml():
    """pyyaml, or one line naming the pip command: missing, or broken (an import that fails
    otherwise, or a module without the loader)."""
    pip = "pip install pyyaml (or pip install 'fpt[sweep]')"
    try:
        yaml = require("yaml", pip)
    except FptError:
        raise
    except Exception as exc:  # noqa: BLE001  a broken install raises anything on import
        raise FptError(f"pyyaml is installed but broken ({type(exc).__name__}); reinstall it: {pip}") from None
    if not all(hasattr(yaml, name) for name in ("SafeLoader", "YAMLError", "compose", "safe_load")):
        raise FptError(f"pyyaml is installed but broken (no SafeLoader); reinstall it: {pip}")
    return yaml


def _unique_key_loader(yaml):
    """SafeLoader refusing a key given twice in one mapping (YAML itself keeps the last silently)."""

    class UniqueKeyLoader(yaml.SafeLoader):
        """SafeLoader whose mappings refuse a key given twice."""

        def construct_mapping(self, node, deep=False):
            """The mapping, once no key in it (merge keys aside) is given twice."""
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<:`: merged in by SafeLoader itself
                    continue
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, collections.abc.Hashable) and key in seen:
                    raise FptError(f"line {key_node.start_mark.line + 1}: key {key!r} is given twice")
                seen.add(key)
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


def read_yaml(path: Path, what: str = "sweep spec") -> tuple[object, object]:
    """A short YAML file's data and its node tree (where each key is, for messages); a missing
    pyyaml or file, text that is not YAML, an empty file or a key given twice is one line naming
    the fix."""
    yaml = _yaml()
    text = read_spec_text(path, what)
    try:
        data, root = yaml.load(text, Loader=_unique_key_loader(yaml)), yaml.compose(text)
    except yaml.YAMLError as exc:
        raise FptError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    except FptError as exc:
        raise FptError(f"{path}, {exc}; keep one") from None
    if data is None:  # a 0-byte file, or comments alone
        raise FptError(f"{what} {path} is empty; write its options in it as YAML (e.g. 'steps: 500')")
    return data, root


def yaml_value(text: str):
    """A value given on the command line (--set) as YAML reads it in a spec: numbers, booleans,
    text; numbers left as text (YAML 1.1 reads 1e-3 so) become numbers where the option takes one
    (`coerce_option`). Text that is not YAML stays text."""
    yaml = _yaml()
    try:
        return yaml.safe_load(text) if text.strip() else text
    except yaml.YAMLError:
        return text


def _node(root, key: str):
    """The YAML node of a top-level key; None where it was merged in with `<<:`."""
    return next((v for k, v in root.value if k.value == key), None)


def _check_entries(
    path: Path, section: str, mapping: dict, node, known: set[str], variants: Variants, cell: str | None = None
) -> None:
    """Check and coerce, in place, the keys and values of the grid, the options or one named cell."""
    for key, value in mapping.items():
        where = f"{path}, line {_line_of(node, key)}"
        if key not in known:
            what = f"key {key!r} of cell {cell}" if cell is not None else f"{section} key {key!r}"
            raise FptError(f"{where}: unknown {what}; use `fpt train` option names with underscores")
        if section == "grid" and (not isinstance(value, list) or not value):
            raise FptError(f"{where}: grid values of {key!r} must be a non-empty list")
        if section == "options" and key in GRID_ONLY_KEYS:
            example = f"{key}: [{quoted(value)}]"
            raise FptError(f"{where}: {key!r} names the cells of a sweep; list it under grid (e.g. {example})")
        if section == "cells" and isinstance(value, (list, dict)):
            raise FptError(f"{where}: cell {cell}'s {key!r} is one value, not a {type(value).__name__}")
        values = [coerce_option(key, item, where) for item in (value if section == "grid" else [value])]
        for item in values:
            _check_value(key, item, where, variants)
        mapping[key] = values if section == "grid" else values[0]


def _named_cells(path: Path, cells, node, known: set[str], variants: Variants) -> dict[str, dict]:
    """`cells:`, each a name (its run directory's) mapped to its options, task included."""
    if not isinstance(cells, dict) or not cells:
        raise FptError(f"{path}: 'cells' must map each cell's name to its options (e.g. mnist-seed0: {{task: mnist}})")
    if len(cells) > MAX_CELLS:
        raise FptError(f"{path}: 'cells' has {len(cells):,} cells; at most {MAX_CELLS:,} are run by one sweep")
    for name, values in cells.items():
        where = f"{path}, line {_line_of(node, name)}"
        if not (isinstance(name, str) and _CELL_NAME.fullmatch(name) and len(name) <= _MAX_NAME):
            raise FptError(
                f"{where}: cell name {name!r} is not a plain directory name (letters, digits, . _ + = , -; "
                f"at most {_MAX_NAME} characters)"
            )
        if not isinstance(values, dict) or "task" not in values:
            raise FptError(f"{where}: cell {name} must map option names to values, task included (task: mnist)")
        value_node = next((v for k, v in node.value if k.value == name), node)
        _check_entries(path, "cells", values, value_node, known, variants, name)
    return cells


def _sitting_keys(path: Path, data: dict) -> tuple[str | None, float | None]:
    """`runs` (relative to the spec's folder) and `max_minutes`, checked."""
    runs, minutes = data.get("runs"), data.get("max_minutes")
    if runs is not None and (not isinstance(runs, str) or not runs.strip()):
        raise FptError(f"{path}: 'runs' must be a folder's path, relative to the spec's folder (e.g. runs: ../results)")
    if isinstance(minutes, str):  # YAML 1.1 reads 1e-3 as text
        try:
            minutes = float(minutes)
        except ValueError:
            pass
    if minutes is not None and not (
        isinstance(minutes, (int, float)) and not isinstance(minutes, bool) and 0 < minutes < math.inf
    ):
        raise FptError(f"{path}: 'max_minutes' must be a positive number of minutes, got {quoted(data['max_minutes'])}")
    # absolute and normalised (specs/../results is results): the same folder from any working directory
    runs = None if runs is None else os.path.abspath(path.parent / runs)
    return runs, (None if minutes is None else float(minutes))


def load_spec(path: Path, variants: Variants = NO_VARIANTS) -> SweepSpec:
    """Read and check a sweep spec: an unknown key, task or variant (one `variants` does not name),
    a value of the wrong type, or a grid too large is refused, naming its line, before anything runs."""
    path = Path(path)
    data, root = read_yaml(path)
    if not isinstance(data, dict):
        raise FptError(f"{path}: a sweep spec is a mapping with keys {', '.join(sorted(SPEC_KEYS))}")
    for key in data:
        if key not in SPEC_KEYS:
            raise FptError(
                f"{path}, line {_line_of(root, key)}: unknown key {key!r}; a spec has {', '.join(sorted(SPEC_KEYS))}"
            )
    named = "cells" in data
    if named and "grid" in data:
        raise FptError(f"{path}: give 'grid' or 'cells', not both")
    grid, options = ({} if named else data.get("grid") or {}), data.get("options") or {}
    if not named and (not isinstance(grid, dict) or not grid):
        raise FptError(f"{path}: 'grid' must map option names to lists of values")
    if not isinstance(options, dict):
        raise FptError(f"{path}: 'options' must map option names to values (e.g. options: {{steps: 500}})")
    section = "cells" if named else "grid"
    node = _node(root, section)
    if node is None:  # safe_load merged it in from a `<<:` key
        raise FptError(f"{path}: write {section!r} as a key of the spec itself, not merged in with '<<'")
    known = option_names()
    cells = _named_cells(path, data["cells"], node, known, variants) if named else None
    if not named:
        _check_entries(path, "grid", grid, node, known, variants)
    _check_entries(path, "options", options, _node(root, "options") or root, known, variants)
    if not named and "task" not in grid:  # the tables are laid out by task: without one every cell ran, then failed
        raise FptError(f"{path}: the grid names no task; list it there (e.g. task: [bit-xor])")
    size = math.prod(len(values) for values in grid.values())
    if size > MAX_CELLS:
        raise FptError(f"{path}: the grid has {size:,} cells; at most {MAX_CELLS:,} are run by one sweep")
    parallel = data.get("parallel", 1)
    if not isinstance(parallel, int) or isinstance(parallel, bool) or not 1 <= parallel <= MAX_PARALLEL:
        raise FptError(f"{path}: 'parallel' must be an integer from 1 to {MAX_PARALLEL}, got {quoted(parallel)}")
    name = data.get("name") or path.stem
    if not isinstance(name, str):  # YAML reads `name: 2024-05-01` as a date
        raise FptError(f"{path}: 'name' must be a string; quote it (name: \"{quoted(name)}\")")
    spec = SweepSpec(name, grid, options, parallel, cells, *_sitting_keys(path, data), variants=variants)
    spec.cells()  # refuses duplicate cells now, before anything runs
    check_cell_options(spec, str(path))
    return spec


def cell_options(options: dict, values: dict, variants: Variants = NO_VARIANTS) -> dict:
    """The `fpt train` options of one cell: the spec's options (less those only transformers take,
    for a baseline cell), overridden by its variant's bundle (so `vit` wins over a spec-wide
    backbone) and what that variant takes on this task (the paper's `full` on CIFAR-10: 3 layers),
    overridden by the cell's own grid values. A variant `variants` does not name is refused."""
    from fpt.training.config import TRANSFORMER_ONLY_OPTIONS

    name = values.get("variant")
    if name is not None and name not in variants.bundles:
        raise FptError(f"unknown variant {quoted(name)}; choose from {', '.join(variants.bundles) or '(none here)'}")
    variant = dict(variants.bundles[name]) if name is not None else {}
    # a table of FPT and LSTM rows run with `precision: bf16` gives it to the transformer cells only
    baseline = values.get("model", variant.get("model", options.get("model", "fpt"))) != "fpt"
    merged = {k: v for k, v in options.items() if not (baseline and k in TRANSFORMER_ONLY_OPTIONS)}
    merged.update(variant)
    merged.update(variants.per_task.get((name, values.get("task")), {}))
    merged.update({k: v for k, v in values.items() if k != "variant"})
    return merged


def train_args(options: dict, values: dict, variants: Variants = NO_VARIANTS) -> list[str]:
    """One cell's options (`cell_options`) written as `fpt train` flags: the cell's record
    (fpt.experiments.cell_records) compares them; a cell runs from its config file, not from these."""
    args = []
    for key, value in cell_options(options, values, variants).items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else "--no-" + flag[2:])
        elif value is not None:
            args += [flag, str(value)]
    return args


def cell_config(spec: SweepSpec, values: dict, **fields):
    """The TrainConfig a cell trains with, as `fpt train` would make it from the cell's options given
    as flags (`cell_options`; one set to null is left to the recipe, as an option not given is),
    `fields` set over them (the sitting's threads). Its JSON is the cell's config file, the one thing
    its `fpt train` process is given (fpt.experiments.sweep), so no option goes through a flag."""
    from fpt.tasks import TASK_OPTIONS
    from fpt.training.config import TrainConfig

    options = {k: v for k, v in spec.cell_options(values).items() if v is not None}
    task = {k: options.pop(k) for k in list(options) if k in TASK_OPTIONS}
    return TrainConfig.from_recipe(options.pop("recipe", "paper"), **{**options, **fields}, task_options=task)


def check_cell_options(spec: SweepSpec, where: str) -> None:
    """Every cell's options checked as `fpt train` checks them (numbers in range, names known)
    before anything runs: a value out of range would otherwise fail each cell in turn."""
    from fpt.tasks import task_options

    for cell in spec.cells():
        try:
            config = cell_config(spec, cell.values)
            config.validate()
            # the task's options too (`lookback: -3`, an option the task does not take), from their
            # values alone: no data is read
            task_options(config.task, config.task_options)
        except FptError as exc:
            raise FptError(f"{where}: cell {cell.name}: {exc}") from None
