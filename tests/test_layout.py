"""The house: imports run one way, bottom to top, and the README's Python API stays importable."""

from __future__ import annotations

import ast
from pathlib import Path

import fpt

SOURCE = Path(fpt.__file__).parent

# Each package of fpt and its level: a module imports only its own package or a lower level. Read from
# the bottom: core knows nothing of fpt; data reads files; backbones load pretrained bodies; tasks make
# batches (and never import backbones); models put a backbone between trained ends; tracking copies
# results out; training runs the loop; serve puts a trained run to use; experiments are grids of runs
# and the paper's tables; cli parses, calls and prints.
LEVELS = {
    "core": 0,  # errors, paths, jsonfile, runtime (process settings, the parent watch), devices, scores, choices
    "data": 1,
    "backbones": 2,
    "tasks": 2,
    "models": 3,
    "reference": 3,  # the field's reference methods (statsforecast, Naive2) run beside fpt, scored by tasks' metrics
    "tracking": 4,
    "training": 5,
    "serve": 6,
    "experiments": 7,
    "cli": 8,
}


def _part(module: str) -> str | None:
    """fpt.backbones.load -> backbones; fpt -> None (the package root re-exports, it is exempt)."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 and pieces[0] == "fpt" else None


def _imports(path: Path) -> set[str]:
    """Every fpt module a file imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fpt"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)  # from fpt import cli
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("fpt"))
    return found


def _modules() -> dict[str, Path]:
    return {
        ".".join(("fpt",) + path.relative_to(SOURCE).with_suffix("").parts).removesuffix(".__init__"): path
        for path in SOURCE.rglob("*.py")
    }


def test_every_module_belongs_to_a_level():
    parts = {_part(name) for name in _modules()} - {None, "__main__"}
    assert parts <= set(LEVELS), parts - set(LEVELS)


def test_imports_run_one_way_from_bottom_to_top():
    upward = []
    for name, path in _modules().items():
        part = _part(name)
        if part in (None, "__main__"):
            continue
        for imported in _imports(path):
            target = _part(imported)
            if target in LEVELS and target != part and LEVELS[target] >= LEVELS[part]:
                upward.append(f"{name} imports {imported}")
    assert not upward, upward


def test_data_and_tasks_never_import_backbones_and_nothing_imports_cli():
    for name, path in _modules().items():
        imported = {_part(m) for m in _imports(path)}
        if _part(name) in ("data", "tasks"):
            assert "backbones" not in imported, name
        if name != "fpt.__main__" and _part(name) != "cli":
            assert "cli" not in imported, name


def test_the_readme_python_api_is_importable():
    for name in (
        "train",
        "resume",
        "load_run",
        "evaluate",
        "predict",
        "TrainConfig",
        "Trainer",
        "load_backbone",
        "list_backbones",
        "create_task",
        "list_tasks",
        "FrozenPretrainedTransformer",
        "FptError",
        "GROUPS",
        "POLICIES",
        "format_group_table",
        "register_backbone",
        "register_task",
        "TrainableModel",
    ):
        assert hasattr(fpt, name), name
    assert callable(fpt.train) and fpt.train.__module__ == "fpt.training.lifecycle"


def test_baselines_and_the_transformer_are_trainable_models(tiny_gpt2):
    from fpt.models.baselines import build_baseline
    from fpt.models.ends import TrainableModel

    task = fpt.create_task("bit-xor", n_bits=4, eval_size=4)
    transformer = fpt.FrozenPretrainedTransformer(fpt.load_backbone(tiny_gpt2), task.spec)
    for model in (transformer, build_baseline("lstm", task)):
        assert isinstance(model, TrainableModel)
        assert model.weights_hash and model.weights_name


def _edges() -> dict[str, set[str]]:
    """module -> the fpt modules it imports (a `from package import name` names the submodule if
    there is one), at the top or inside functions; the package root `fpt` is left out."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        targets = set()
        for imported in _imports(path):
            if imported in modules and imported != "fpt":
                targets.add(imported)
            elif imported.rsplit(".", 1)[0] in modules and imported.rsplit(".", 1)[0] != "fpt":
                targets.add(imported.rsplit(".", 1)[0])
        graph[name] = targets - {name}
    return graph


def test_there_is_no_import_cycle():
    graph, state, cycles = _edges(), {}, []

    def visit(node, trail):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(trail[trail.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, cycles


def _longest_chain() -> list[str]:
    """The longest chain of parts each importing the next (e.g. cli -> experiments -> training -> ...)."""
    parts: dict[str, set[str]] = {}
    for name, targets in _edges().items():
        part = _part(name)
        if part not in (None, "__main__"):
            parts.setdefault(part, set()).update(_part(t) for t in targets if _part(t) not in (None, part))
    longest: dict[str, list[str]] = {}

    def chain(part: str) -> list[str]:
        if part not in longest:
            longest[part] = [part] + max((chain(t) for t in parts.get(part, ())), key=len, default=[])
        return longest[part]

    return max((chain(part) for part in parts), key=len)


def test_the_longest_import_chain_stays_short():
    """Each level a reader climbs through to follow a call: issue 30's bound (10 before it)."""
    assert len(_longest_chain()) <= 8, _longest_chain()


def _lines_of_functions() -> dict[str, int]:
    """module:function -> its lines, from `def` to its last line (docstring and comments included)."""
    lengths = {}
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lengths[f"{name}:{node.name}"] = node.end_lineno - node.lineno + 1
    return lengths


def test_no_module_is_over_500_lines():
    """Issue 30: a module a reader can hold; the largest today is prediction.py (484)."""
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > 500}
    assert not long, long


def test_no_function_is_over_60_lines():
    """Issue 30's bound: a function a reader can hold at once."""
    long = {name: n for name, n in _lines_of_functions().items() if n > 60}
    assert not long, long


def test_the_tests_mirror_the_packages():
    """tests/PACKAGE/ holds the tests of src/fpt/PACKAGE/ (the project-wide ones, docs, layout and tables,
    stay at the top), so a change to a package finds its tests in the folder of the same name."""
    tests = Path(__file__).parent
    folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    assert folders <= set(LEVELS), folders - set(LEVELS)
    for folder in folders:
        stray = [p.name for p in (tests / folder).iterdir() if p.suffix == ".py" and not p.name.startswith("test_")]
        assert not stray, f"tests/{folder}/ holds test modules only; helpers live in tests/helpers.py: {stray}"
    names = [p.name for p in tests.rglob("test_*.py")]
    assert len(names) == len(set(names)), "two test modules share a name: pytest imports them by name"


def test_no_module_name_is_used_in_two_packages():
    """A module's name says which one it is: `forecasting` in tasks/ and in reference/ would not."""
    stems: dict[str, list[str]] = {}
    for path in SOURCE.rglob("*.py"):
        if path.stem not in ("__init__", "__main__"):
            stems.setdefault(path.stem, []).append(str(path.relative_to(SOURCE)))
    assert not {stem: where for stem, where in stems.items() if len(where) > 1}


# The generic sweep engine (a grid of `fpt train` runs, resumable, on threads or Ray) and the paper's side
# (its variants, figures, tables, plots and searches), which is built on the engine: the engine imports no
# module of experiments/ but its own, so a user's sweep runs without the paper and the paper's tables can
# change without touching how cells run (issue 56).
SWEEP_ENGINE = ("sweep_spec", "sweep", "sweep_stop", "cell_records", "sittings", "ray_executor")


def test_the_sweep_engine_imports_nothing_of_the_paper():
    engine = {f"fpt.experiments.{name}" for name in SWEEP_ENGINE}
    modules = _modules()
    assert engine <= set(modules), engine - set(modules)
    outside = [
        f"{name} imports {target}"
        for name in sorted(engine)
        for target in sorted(_edges()[name])
        if target.startswith("fpt.experiments.") and target not in engine
    ]
    assert not outside, outside


def test_fpt_train_reaches_the_optimizer_in_four_calls_across_three_modules(tiny_gpt2, tmp_path, monkeypatch):
    import inspect

    import torch

    from fpt.cli import main

    stacks = []
    step = torch.optim.Adam.step

    def recording_step(self, *args, **kwargs):  # the calls of fpt's on the way here, from cmd_train down
        if not stacks:
            frames = [f for f in inspect.stack()[1:] if Path(f.filename).is_relative_to(SOURCE)]
            names = [f"{Path(f.filename).relative_to(SOURCE).as_posix()}:{f.function}" for f in reversed(frames)]
            stacks.append(names[[n.endswith(":cmd_train") for n in names].index(True) :])
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", recording_step)
    argv = ["train", "--task", "bit-xor", "--n-bits", "4", "--backbone", tiny_gpt2, "--steps", "1", "--no-progress"]
    assert main([*argv, "--no-baselines", "--out", str(tmp_path / "run")]) == 0
    assert stacks == [
        ["cli/train.py:cmd_train", "training/lifecycle.py:train", "training/loop.py:fit", "training/loop.py:train_step"]
    ]


# Options that several commands take under one name, each command's checked in its own module (module: command).
ONE_NAME_SEVERAL_COMMANDS = {
    "out": {
        "training/run_dir.py": "train",
        "serve/export.py": "export",
        "serve/predict.py": "predict",
        "cli/runs.py": "export-backbone",
    },
    "batch-size": {"training/config.py": "train", "cli/runs.py": "evaluate, predict"},
}


def _option_checks() -> dict[str, set[str]]:
    """option -> the modules raising an FptError whose message opens with it ("--steps must ...", "unknown --body
    ..."): the checks of that option, as opposed to messages that name an option as the fix."""
    import re

    found: dict[str, set[str]] = {}
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            call = node.exc if isinstance(node, ast.Raise) else None
            if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "FptError" and call.args):
                continue
            first = call.args[0]
            opening = first.values[0] if isinstance(first, ast.JoinedStr) and first.values else first
            if isinstance(opening, ast.Constant) and isinstance(opening.value, str):
                option = re.match(r"(?:unknown )?--([a-z][a-z0-9-]*)", opening.value)
                if option:
                    found.setdefault(option.group(1), set()).add(path.relative_to(SOURCE).as_posix())
    return found


def test_an_option_given_on_the_command_line_is_checked_in_one_module():
    checks = _option_checks()
    assert {"steps", "epochs", "body", "layers", "precision", "patch-size", "resume"} <= set(checks)  # the scan sees
    spread = {
        option: sorted(modules)
        for option, modules in checks.items()
        if len(modules) > 1 and not modules <= set(ONE_NAME_SEVERAL_COMMANDS.get(option, {}))
    }
    assert not spread, spread
