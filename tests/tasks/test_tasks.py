import inspect
import typing

import pytest
import torch
from helpers import one_line_error

from fpt.cli import main
from fpt.core.errors import FptError
from fpt.tasks import TASK_OPTIONS, create_task, list_tasks, register_task
from fpt.tasks.registry import NOT_OPTIONS, OPTION_HELP, factory_option_types, task_factory


def test_bit_memory_matches_the_paper():
    task = create_task("bit-memory")
    assert task.spec.seq_len == 120 and task.spec.input_dim == 50
    assert task.spec.last_k == 20 and task.spec.outputs_per_token == 50 and task.spec.num_outputs == 1000
    batch = task.train_batch(step=0, batch_size=64, seed=0)
    assert batch.x.shape == (64, 120, 50) and batch.y.shape == (64, 1000)
    strings = batch.x[:, :100].reshape(64, 5, 1000)
    query = batch.x[:, 100:].reshape(64, 1000)
    assert set(strings.unique().tolist()) == {-1.0, 1.0}
    target = batch.y.float() * 2 - 1
    # the target is one of the five strings, and the query is it with some bits zeroed
    assert all(any(torch.equal(strings[i, j], target[i]) for j in range(5)) for i in range(64))
    assert torch.all((query == 0) | (query == target))
    assert (query == 0).float().mean().item() == pytest.approx(0.5, abs=0.01)


def test_bit_xor_targets_are_the_xor():
    task = create_task("bit-xor")
    batch = task.train_batch(step=3, batch_size=32, seed=1)
    assert batch.x.shape == (32, 10) and batch.x.dtype == torch.long
    assert torch.equal(batch.y, batch.x[:, :5] ^ batch.x[:, 5:])
    patched = create_task("bit-xor", n_bits=6, patch_size=3)
    b = patched.train_batch(0, 4, 0)
    assert b.x.shape == (4, 4, 3) and patched.spec.num_outputs == 6
    bits = (b.x.reshape(4, 2, 6) > 0).long()
    assert torch.equal(b.y, bits[:, 0] ^ bits[:, 1])


def test_batches_depend_only_on_seed_and_step():
    task = create_task("bit-xor")
    a, b = task.train_batch(5, 16, seed=0), task.train_batch(5, 16, seed=0)
    assert torch.equal(a.x, b.x)
    assert not torch.equal(a.x, task.train_batch(6, 16, seed=0).x)
    assert not torch.equal(a.x, task.train_batch(5, 16, seed=1).x)


def test_bit_tasks_have_a_test_set_apart_from_the_heldout_one():
    task = create_task("bit-memory", n_bits=20, patch_size=5, eval_size=50)
    assert task.eval_split == "heldout" and task.test_splits == ("test",)
    heldout, test = (torch.cat([b.x for b in task.eval_batches(64, split)]) for split in ("heldout", "test"))
    assert heldout.shape == test.shape and not torch.equal(heldout, test)
    again = create_task("bit-memory", n_bits=20, patch_size=5, eval_size=50)
    assert torch.equal(test, torch.cat([b.x for b in again.eval_batches(7, "test")]))  # fixed, whatever the batching


def test_heldout_set_is_fixed_and_whole():
    first = list(create_task("bit-xor", eval_size=300).eval_batches(128))
    again = list(create_task("bit-xor", eval_size=300).eval_batches(100))
    assert [len(b) for b in first] == [128, 128, 44]
    assert torch.equal(torch.cat([b.x for b in first]), torch.cat([b.x for b in again]))


@pytest.mark.parametrize(
    "options, message",
    [
        ({"n_bits": 1000, "patch_size": 30}, "does not divide"),
        ({"n_strings": 0}, "--n-strings"),
        ({"mask_prob": 1.5}, "--mask-prob"),
        ({"eval_size": 0}, "--eval-size"),
        ({"colour": "red"}, "takes no option colour"),
    ],
)
def test_bad_task_options(options, message):
    with pytest.raises(FptError, match=message):
        create_task("bit-memory", **options)


def test_unknown_task():
    with pytest.raises(FptError, match="bit-xor"):
        create_task("bit-nand")


def _annotated_type(factory, key):
    """The option type a factory's parameter declares, read independently of the registry: its
    annotation with None taken out."""
    hints = typing.get_type_hints(factory.__init__ if isinstance(factory, type) else factory)
    kinds = [t for t in (typing.get_args(hints[key]) or (hints[key],)) if t is not type(None)]
    assert len(kinds) == 1, (factory, key, hints[key])
    return kinds[0]


def test_task_options_are_the_factories_parameters_with_their_types_and_one_help():
    seen = {}
    for name in list_tasks():
        factory = task_factory(name)
        for key in inspect.signature(factory).parameters:
            if key in NOT_OPTIONS:
                assert key not in TASK_OPTIONS
                continue
            kind = _annotated_type(factory, key)
            assert TASK_OPTIONS[key][0] is kind, f"{name}: {key} is {kind}, TASK_OPTIONS says {TASK_OPTIONS[key][0]}"
            assert seen.setdefault(key, kind) is kind, f"{key}: two types across tasks"
            assert TASK_OPTIONS[key][1] == OPTION_HELP[key], f"{key} has no help in OPTION_HELP"
    assert set(TASK_OPTIONS) == set(seen) and set(OPTION_HELP) == set(seen)  # no stale help either
    assert list(TASK_OPTIONS) == list(OPTION_HELP)  # --help lists them in the order written


def test_an_option_a_factory_gains_is_typed_by_its_annotation():
    def shuffled(path: str, n_bits: int = 4, seed: int | None = None, fraction: float = 0.5, name: str = "x"):
        raise AssertionError("not called")

    assert factory_option_types("shuffled", shuffled) == {"n_bits": int, "seed": int, "fraction": float, "name": str}


@pytest.mark.parametrize("annotation", [": int | str", ": list", ": None", "", ": 'NotImportedHere'"])
def test_a_parameter_the_command_line_cannot_give_is_left_to_python(annotation):
    namespace = {}
    exec(f"def odd(option{annotation} = None, n_bits: int = 3): pass", namespace)
    assert factory_option_types("odd", namespace["odd"]) == {"n_bits": int}


def test_one_option_given_two_types_is_refused_before_the_task_is_registered():
    before = dict(TASK_OPTIONS)

    def clash(n_bits: str = "many", brand_new: int = 1):
        raise AssertionError("not called")

    with pytest.raises(FptError, match="option 'n_bits' the type str, task 'bit-memory' int"):
        register_task("clash")(clash)
    assert "clash" not in list_tasks() and TASK_OPTIONS == before  # nothing half-registered


def test_a_task_option_named_like_a_train_option_is_one_line_naming_the_fix(monkeypatch, capsys):
    # as a plugin's `register_task` leaves it for a factory taking `steps`
    monkeypatch.setitem(TASK_OPTIONS, "steps", (int, "plugin: see the task's docstring"))
    assert main(["train", "--help"]) == 2
    message = one_line_error(capsys)
    assert "task option 'steps'" in message and "--steps" in message and "rename the task's parameter" in message


@pytest.mark.parametrize("name", ["out", "train", "max_minutes", "resume"])
def test_a_task_option_named_like_any_other_flag_is_one_line_too(monkeypatch, capsys, name):
    monkeypatch.setitem(TASK_OPTIONS, name, (str, "plugin: see the task's docstring"))
    assert main(["backbones"]) == 2
    message = one_line_error(capsys)
    assert f"--{name.replace('_', '-')}" in message and "rename the task's parameter" in message
