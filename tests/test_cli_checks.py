"""The command line checks before it works (issue 24, item 3): --backend, --segments and output paths fail before the
first line of output (an output file's missing folder is an error, never created); flags read `--viz / --no-viz`
in help, no `<bool>`; `--viz` on every command that traces; the command list's help texts are whole sentences;
a torch model file whose model() returns the class says so; Ctrl-C before the output folder is checked exits 130."""

from __future__ import annotations

import json
import pathlib
import re

import pytest
from typer.testing import CliRunner

from gradir.cli.app import app

try:
    runner = CliRunner(mix_stderr=False)  # click < 8.2 mixes stderr into stdout unless told not to
except TypeError:
    runner = CliRunner()  # click >= 8.2 keeps them apart

REPO = pathlib.Path(__file__).resolve().parents[1]
TANH = REPO / "examples" / "models" / "tanh_scalar.py"
MLP = REPO / "examples" / "models" / "mlp.py"
BLOCKS = REPO / "examples" / "models" / "residual_blocks.py"  # twelve gr.scope blocks


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_an_unknown_backend_fails_before_any_output():
    result = run("trace", MLP, "--backend", "cuda")
    assert result.exit_code == 2 and result.stdout == ""
    assert "unknown --backend 'cuda' (kernel listings exist for: llvm)" in result.stderr


@pytest.mark.parametrize("command", ["trace", "memory"])
def test_segments_beyond_the_models_blocks_is_an_error_before_any_output(command):
    result = run(command, BLOCKS, "--remat", "uniform", "--segments", "1000")
    assert result.exit_code == 2 and result.stdout == ""
    assert "--segments 1000 is more than the 12 blocks of loss: choose 1 to 12" in result.stderr
    ok = run("memory", BLOCKS, "--segments", "12", "--format", "json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["remat"]["options"]["segments"] == 12


@pytest.mark.parametrize("command", ["trace", "schedule", "saved", "memory"])
def test_an_output_file_in_a_missing_folder_is_an_error_not_created(tmp_path, command):
    target = tmp_path / "missing" / "dir" / "x.csv"
    result = run(command, TANH, "-o", target)
    assert result.exit_code == 2 and result.stdout == ""
    assert f"cannot write --output {target}: its folder {target.parent} does not exist" in result.stderr
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("command", ["schedule", "saved", "memory"])
def test_ctrl_c_before_the_output_folder_is_checked_exits_130_saying_nothing_was_written(monkeypatch, command):
    def interrupt(*args, **kwargs):  # Ctrl-C while the first option is checked: no output folder yet
        raise KeyboardInterrupt
    monkeypatch.setattr("gradir.cli.app.check_output_file", interrupt)
    result = run(command, TANH)
    assert result.exit_code == 130 and isinstance(result.exception, SystemExit), result.exception
    assert result.stdout == "" and result.stderr.strip() == "gradir: interrupted; nothing was written"


def test_schedule_plot_path_and_format_are_checked_before_any_output(tmp_path):
    missing = run("schedule", TANH, "--plot", tmp_path / "nope" / "m.svg")
    assert missing.exit_code == 2 and missing.stdout == "" and "cannot write --plot" in missing.stderr
    jpeg = run("schedule", TANH, "--plot", tmp_path / "m.jpg")
    assert jpeg.exit_code == 2 and jpeg.stdout == "" and "the format is taken from the extension" in jpeg.stderr


@pytest.mark.parametrize("command", ["trace", "schedule", "saved", "memory", "check"])
def test_flags_read_as_flags_and_viz_is_offered_everywhere(command):
    text = run(command, "--help").stdout
    assert "<bool>" not in text and "--viz / --no-viz" in text and "--out" in text
    assert run(command, TANH, "--no-viz").exit_code == 0


def test_the_command_list_is_whole_sentences():
    text = run("--help").stdout
    listing = text.split("Commands:")[1]
    entries = re.findall(r"^  (\w+)\s+(.*?)(?=^  \w|\Z)", listing, flags=re.S | re.M)
    assert [name for name, _ in entries] == ["trace", "schedule", "saved", "memory", "check"]
    for name, help_text in entries:
        sentence = " ".join(help_text.split())
        assert sentence.endswith(".") and sentence.count(". ") == 0, (name, sentence)  # one whole sentence


@pytest.mark.parametrize("command", ["schedule", "check"])
def test_viz_writes_the_diagrams_and_report_for_other_commands(tmp_path, command):
    result = run(command, TANH, "--viz", "--out", tmp_path)
    assert result.exit_code == 0, result.stderr
    manifest = json.loads((tmp_path / "loss.manifest.json").read_text())
    assert manifest["status"] == "complete" and (tmp_path / "loss.html").exists()


def test_a_torch_model_function_returning_the_class_says_so(tmp_path):
    pytest.importorskip("torch")
    path = tmp_path / "net.py"
    path.write_text("import torch\n\nclass Net(torch.nn.Linear):\n    def __init__(self):\n        super().__init__(3, 1)\n\n"
                    "def model():\n    return Net\n\ndef example_inputs():\n    return (torch.ones(2, 3),)\n")
    result = run("trace", path)
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert "model() returns the class Net, not a module: return an instance, Net(...)" in result.stderr
