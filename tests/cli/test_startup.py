"""`fpt --help`, every command's --help, a usage error and `fpt backbones` answer without importing
torch or transformers (issue 59: `fpt --help` took 1.3x a bare `import torch`), and say what they
said when the CLI imported everything: each runs in a fresh process, and its output is compared with
the same command's in a process that first loaded the task and backbone registries."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fpt.cli import COMMANDS

HEAVY = ("torch", "transformers")

# Runs each argv (a JSON list of lists) through fpt.cli.main in this one process, after importing
# the modules named in argv[1] (the registries, to reproduce the CLI as it was), and prints one JSON
# object: each command's exit status and output, and which of HEAVY it left imported.
HARNESS = """
import contextlib, importlib, io, json, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
from fpt.cli import main
results = []
for argv in json.loads(sys.argv[2]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as leaving:  # --help and argparse's own exits
            code = leaving.code
    results.append([code, out.getvalue(), err.getvalue()])
heavy = [name for name in %r if name in sys.modules]
print(json.dumps({"results": results, "heavy": heavy}))
""" % (HEAVY,)

CASES = [
    ["--help"],
    ["--version"],
    *([command, "--help"] for command in sorted(COMMANDS)),
    ["data", "get", "--help"],
    ["backbones"],
    [],  # no command: a usage error
    ["frobnicate"],
    ["train", "--no-such-option", "3"],
    ["train", "--npro", "2"],  # no abbreviations
    ["train", "--steps", "many"],
    ["predict", "runs/x"],  # --input missing
    ["reproduce", "table1", "--budget"],
]


def _run(argvs: list[list[str]], preload: tuple[str, ...] = ()) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", HARNESS, json.dumps(list(preload)), json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def as_before() -> dict[str, list]:
    """Every case's status and output in one process where the registries (tasks, backbones,
    models) were imported first, as the CLI imported them before it answered anything."""
    preload = ("torch", "fpt.tasks", "fpt.backbones.load", "fpt.models.baselines", "fpt.training.lifecycle")
    found = _run(CASES, preload)
    assert "torch" in found["heavy"]
    return {json.dumps(argv): result for argv, result in zip(CASES, found["results"])}


@pytest.mark.parametrize("argv", CASES, ids=" ".join)
def test_the_command_imports_neither_torch_nor_transformers_and_says_what_it_said(argv, as_before):
    found = _run([argv])
    assert found["heavy"] == [], f"fpt {' '.join(argv)} imported {found['heavy']}"
    code, out, err = found["results"][0]
    assert [code, out, err] == as_before[json.dumps(argv)]
    if code == 2:  # a usage mistake: one line naming the fix, nothing on stdout
        assert out == "" and err.count("\n") == 1 and err.startswith("fpt: error: ")
    else:
        assert code == 0 and out and not err


def test_train_help_offers_every_task_option_without_the_registry():
    # directly: every option a built-in task's signature gives is offered without the registry
    code, out, _ = _run([["train", "--help"]])["results"][0]
    from fpt.core.choices import BUILTIN_TASKS
    from fpt.tasks import task_factory
    from fpt.tasks.registry import factory_option_types

    options = {key for name in BUILTIN_TASKS for key in factory_option_types(name, task_factory(name))}
    assert code == 0 and len(options) > 20 and all(f"--{name.replace('_', '-')} " in out for name in options)


def test_backbones_lists_every_registered_backbone():
    code, out, _ = _run([["backbones"]])["results"][0]
    from fpt.backbones import list_backbones

    names = [line.split()[0] for line in out.splitlines()[1:] if line and not line.startswith(" ")]
    assert code == 0 and names[:-1] == [entry.name for entry in list_backbones()]  # the last: "Any Hugging Face..."


def test_import_fpt_is_light_and_every_public_name_still_resolves():
    code = (
        "import sys, fpt; light = not any(m in sys.modules for m in %r); "
        "from fpt import *; import fpt.training.lifecycle as life, fpt.serve.estimators as est; "
        "same = fpt.train is life.train and fpt.FPTClassifier is est.FPTClassifier; "
        "missing = [n for n in fpt.__all__ if n not in globals()]; "
        "print(light, same, missing, set(fpt.__all__) <= set(dir(fpt)))" % (HEAVY,)
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.split("\n")[0] == "True True [] True", done.stderr[-2000:]
    done = subprocess.run(  # as when `import fpt` imported them all
        [sys.executable, "-c", "import fpt; print(fpt.tasks.create_task is fpt.create_task, fpt.core.errors.__name__)"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.stdout.split() == ["True", "fpt.core.errors"], done.stderr[-2000:]
    import fpt

    with pytest.raises(AttributeError, match="no attribute 'nonesuch'"):
        fpt.nonesuch  # noqa: B018


def test_the_light_choices_are_the_acting_modules_own():
    from fpt.backbones.surgery import AUTO, PRECISION_CHOICES, PRECISIONS
    from fpt.core import choices
    from fpt.tasks import list_tasks, task_factory

    assert PRECISION_CHOICES == (AUTO, *PRECISIONS)
    built_in = [name for name in list_tasks() if task_factory(name).__module__.startswith("fpt.")]
    assert built_in == sorted(choices.BUILTIN_TASKS)
    assert choices.task_names() == list_tasks()


def test_info_counts_a_pretrained_body_from_its_files_without_transformers(tiny_backbones):
    """`fpt info` on a pretrained body reads its config and safetensors header (issue 59: 4.05 s on two
    cores, 2.5 of them importing transformers and loading weights): it says what the built model says
    (--layers 2 keeps both of the tiny BERT's blocks, and builds it), without transformers or torch's
    compiler (which torch's meta device would import: 2 s)."""
    info = ["info", "--backbone", tiny_backbones["bert"], "--task", "bit-xor", "--n-bits", "4"]
    code = (
        "import contextlib, io, sys; from fpt.cli import main; out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out): status = main(%r)\n"
        "import json; print(json.dumps([status, [m for m in ('transformers', 'torch._dynamo') if m in sys.modules], "
        "out.getvalue()]))"
    )
    said = []
    for argv in (info, [*info, "--layers", "2"]):
        done = subprocess.run([sys.executable, "-c", code % (argv,)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        said.append(json.loads(done.stdout))
    (fast_status, fast_heavy, fast_out), (built_status, built_heavy, built_out) = said
    assert fast_status == built_status == 0 and fast_heavy == [] and "transformers" in built_heavy
    assert fast_out == built_out and "feedforward" in fast_out
