"""One schema for every option: each TrainConfig field carries its help and choices, and the
`fpt train` parser is generated from them; config.py sits below the modules that use it."""

from __future__ import annotations

import dataclasses

import pytest

from fpt.cli import build_parser
from fpt.core.errors import FptError
from fpt.training.config import TrainConfig


def _train_help() -> str:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if a.dest == "command"]  # noqa: SLF001  argparse keeps them here
    return commands.choices["train"].format_help()


def test_every_option_field_is_an_fpt_train_option_with_its_own_help():
    parser = build_parser()
    (commands,) = [a for a in parser._actions if a.dest == "command"]  # noqa: SLF001
    by_dest = {a.dest: a for a in commands.choices["train"]._actions}  # noqa: SLF001
    for field in dataclasses.fields(TrainConfig):
        if field.metadata["group"] is None:
            continue
        assert field.metadata["help"], field.name
        action = by_dest[field.name]
        assert action.option_strings == [f"--{field.name.replace('_', '-')}"] or field.type.startswith("bool")
        assert field.metadata["help"].split(";")[0] in action.help.replace("\n", " "), field.name


def test_checkpointing_is_described_once_in_one_phrasing():
    text = " ".join(_train_help().split())
    assert "about 1.4x step time" in text and "1/3" not in text


@pytest.mark.parametrize(
    "field, value, words",
    [("model", "gpt", "unknown --model 'gpt'; choose one of fpt, lstm"), ("pooling", "max", "unknown --pooling")],
)
def test_choices_checked_in_config_name_the_option(field, value, words):
    with pytest.raises(FptError, match=words):
        TrainConfig(**{field: value}).validate()
