"""The `gradir` command line and the model-file convention (gradir.cli.app, gradir.api.specs).

The printed IR is checked by parsing it back and *running* it: the forward and backward programs
the CLI prints must compute TEACHING.md A's figures and PyTorch's float64 gradients of the MLP.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import gradir as gr
from gradir.api.specs import TensorSpec, default_argnums, example_args, resolve_example
from gradir.backends import run
from gradir.cli import app as cli_app
from gradir.cli.app import app, load_target
from gradir.core.errors import ModelFileError
from gradir.passes import run_pipeline
from gradir.passes.fusion import VIEWS

REPO = pathlib.Path(__file__).resolve().parents[1]
TANH = REPO / "examples" / "models" / "tanh_scalar.py"
MLP = REPO / "examples" / "models" / "mlp.py"
GRAPH = re.compile(r"^graph \S+ \{$.*?^\}$", re.S | re.M)

try:
    runner = CliRunner(mix_stderr=False)  # click < 8.2 mixes stderr into stdout unless told not to
except TypeError:
    runner = CliRunner()  # click >= 8.2 keeps them apart


def _import(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _graphs(stdout: str) -> tuple[gr.Graph, gr.Graph]:
    texts = GRAPH.findall(stdout)
    assert len(texts) == 2, stdout
    return gr.Graph.parse(texts[0]).verify(), gr.Graph.parse(texts[1]).verify()


def _trace(*args: str):
    result = runner.invoke(app, ["trace", *args])
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def _run_printed(forward: gr.Graph, backward: gr.Graph, args: list) -> tuple[float, list]:
    """Run the printed programs: forward -> (loss, saved...), backward(saved..., 1.0) -> gradients."""
    outs = run(forward, args)
    loss, saved = outs[0], outs[1:]
    grads = run(backward, list(saved) + [np.ones((), dtype=np.asarray(loss).dtype)])
    return float(loss), grads


# -- gradir trace -----------------------------------------------------------------------------------


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip() == f"gradir {importlib.metadata.version('gradir')}"


def test_trace_tanh_scalar_prints_ir_that_parses_and_matches_trace():
    forward, backward = _graphs(_trace(str(TANH)).stdout)
    module = _import(TANH, "tanh_scalar_oracle")
    traced = gr.trace(module.loss, 1.5, -2.0)
    # the printed forward is the traced function plus the values it saves for backward
    assert len(forward.outputs) > 1
    forward.outputs = forward.outputs[:1]
    forward.name = traced.name
    assert str(forward) == str(traced)
    assert [x.attrs["name"] for x in backward.inputs][-1] == "ct0"
    assert [o.shape for o in backward.outputs] == [(), ()]


def test_printed_tanh_scalar_programs_compute_teaching_figures():
    forward, backward = _graphs(_trace(str(TANH)).stdout)
    loss, (da, db) = _run_printed(forward, backward, [np.float64(1.5), np.float64(-2.0)])
    assert loss == pytest.approx(-0.9051482536, abs=1e-10)
    assert float(da) == pytest.approx(-0.1807066389, abs=1e-10)
    assert float(db) == pytest.approx(0.2710599584, abs=1e-10)


def test_mlp_differentiates_parameters_and_matches_torch():
    out = _trace(str(MLP)).stdout
    assert re.search(r"^differentiated\s+w1, b1, w2, b2\s*$", out, re.M), out
    forward, backward = _graphs(out)
    module = _import(MLP, "mlp_oracle")
    args = example_args(module.loss)
    assert [o.shape for o in backward.outputs] == [a.shape for a in args[2:]]
    # forward programs in float64 (same ops, same graph) so torch float64 is a tight oracle
    loss, grads = _run_printed(_as_f64(forward), _as_f64(backward), [_f64(a) for a in args])

    x, labels, *params = (torch.from_numpy(_f64(a)) for a in args)
    params = [p.requires_grad_() for p in params]
    w1, b1, w2, b2 = params
    ref = torch.nn.functional.cross_entropy(torch.tanh(x @ w1 + b1) @ w2 + b2, labels)
    ref.backward()
    assert loss == pytest.approx(ref.item(), rel=1e-12)
    for g, p in zip(grads, params):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-10, atol=1e-12)


def _f64(a):
    a = np.asarray(a)
    return a.astype(np.float64) if a.dtype == np.float32 else a


def _as_f64(g: gr.Graph) -> gr.Graph:
    """The printed text with f32 replaced by f64: the same program, evaluated in float64."""
    return gr.Graph.parse(str(g).replace("f32", "f64")).verify()


def test_mlp_forward_matches_trace_and_saves_only_new_memory_it_reports():
    out = _trace(str(MLP)).stdout
    forward, backward = _graphs(out)
    module = _import(MLP, "mlp_oracle2")
    # cleanup (constant folding, cse, dce) runs on the joint graph, so compare with the cleaned trace
    traced = run_pipeline(gr.trace(module.loss, *example_args(module.loss)))
    saved = forward.outputs[1:]
    forward.outputs, forward.name = forward.outputs[:1], traced.name
    assert str(forward) == str(traced)
    computed = [v for v in saved if v.op != "input"]
    total = sum(int(np.prod(v.shape)) * v.dtype.itemsize for v in computed)
    assert f"{len(saved)} values: {len(saved) - len(computed)} inputs" in out
    assert f"{total:,} B" in out


def test_subprocess_python_m_gradir():
    proc = subprocess.run([sys.executable, "-m", "gradir", "trace", "examples/models/tanh_scalar.py"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    forward, backward = _graphs(proc.stdout)
    loss, (da, db) = _run_printed(forward, backward, [np.float64(1.5), np.float64(-2.0)])
    assert float(db) == pytest.approx(0.2710599584, abs=1e-10)


def test_out_writes_parseable_ir(tmp_path):
    out = _trace(str(TANH), "--out", str(tmp_path)).stdout
    forward, backward = _graphs(out)
    assert gr.Graph.parse((tmp_path / "loss.forward.ir").read_text()).to_text() == forward.to_text()
    assert gr.Graph.parse((tmp_path / "loss.backward.ir").read_text()).to_text() == backward.to_text()


def test_argnums_by_name_and_position():
    by_name = _graphs(_trace(str(MLP), "--argnums", "w2,b2").stdout)[1]
    by_pos = _graphs(_trace(str(MLP), "--argnums", "4,5").stdout)[1]
    assert [o.shape for o in by_name.outputs] == [(32, 4), (4,)]
    assert str(by_name) == str(by_pos)


# -- choosing the function --------------------------------------------------------------------------


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_picks_the_only_annotated_function(tmp_path):
    path = _write(tmp_path, "cube.py", "import gradir as gr\n\ndef helper(x):\n    return x\n\n"
                  "def cube(x: gr.f64[3]):\n    return gr.sum(x * x * x)\n")
    forward, backward = _graphs(_trace(path).stdout)
    x = example_args(_import(pathlib.Path(path), "cube_oracle").cube)[0]
    _, (g,) = _run_printed(forward, backward, [x])
    np.testing.assert_allclose(g, 3 * x**2, rtol=1e-14)  # d/dx sum(x^3) = 3x^2


def test_fn_option_and_model_default(tmp_path):
    text = ("import gradir as gr\n\ndef model(a: gr.f64):\n    return gr.sin(a)\n\n"
            "def other(a: gr.f64):\n    return gr.exp(a)\n")
    path = _write(tmp_path, "two.py", text)
    assert "sin" in str(_graphs(_trace(path).stdout)[0])
    forward = _graphs(_trace(path, "--fn", "other").stdout)[0]
    assert "exp" in str(forward) and "sin" not in str(forward)


# -- errors: one line on stderr, exit code 2, the file named, no traceback --------------------------


def _error(args: list[str], code: int = 2) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    err = result.stderr.rstrip("\n")
    assert err and "\n" not in err, err
    assert "Traceback" not in result.output
    return err


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.py")
    assert path in _error(["trace", path])


def test_syntax_error(tmp_path):
    path = _write(tmp_path, "broken.py", "import gradir as gr\n\ndef loss(a:\n    return a\n")
    err = _error(["trace", path])
    assert "broken.py:3" in err and "syntax error" in err


def test_exception_while_importing(tmp_path):
    path = _write(tmp_path, "boom.py", "import gradir as gr\n\nraise RuntimeError('no data here')\n")
    err = _error(["trace", path])
    assert "boom.py:3" in err and "RuntimeError" in err and "no data here" in err


def test_model_without_example_inputs(tmp_path):
    path = _write(tmp_path, "bare.py", "import gradir as gr\n\ndef loss(a, b):\n    return gr.tanh(a * b)\n")
    err = _error(["trace", path])
    assert "bare.py" in err and "example_inputs()" in err and "gr.f32[32, 256]" in err


def test_unknown_fn(tmp_path):
    err = _error(["trace", str(TANH), "--fn", "nosuch"])
    assert "tanh_scalar.py" in err and "'nosuch'" in err and "loss" in err


def test_error_while_tracing_names_the_model_line(tmp_path):
    path = _write(tmp_path, "branchy.py", "import gradir as gr\n\ndef loss(a: gr.f64):\n"
                  "    if a > 0:\n        return a\n    return -a\n")
    err = _error(["trace", path])
    assert "branchy.py" in err and "branchy.py:4" in err and "TracedControlFlowError" in err


def test_bad_argnums(tmp_path):
    err = _error(["trace", str(MLP), "--argnums", "w9"])
    assert "mlp.py" in err and "'w9'" in err


# -- gradir check ------------------------------------------------------------------------------------


def test_check_passes_on_examples():
    for path in (TANH, MLP):
        result = runner.invoke(app, ["check", str(path)])
        assert result.exit_code == 0, (result.stdout, result.stderr)
        assert "passed" in result.stdout


def test_check_fails_when_autodiff_and_differences_disagree(tmp_path):
    # stop_gradient makes autodiff see d/da = a while the function's true slope is 2a
    path = _write(tmp_path, "lying.py", "import gradir as gr\n\ndef loss(a: gr.f64[2]):\n"
                  "    return gr.sum(gr.stop_gradient(a) * a)\n")
    err = _error(["check", path], code=1)
    assert "lying.py" in err and "gradcheck failed" in err


# -- gradir.api.specs --------------------------------------------------------------------------------------


def test_spec_shapes_dtypes_and_examples():
    assert gr.f32[32, 256] == TensorSpec((32, 256), np.float32)
    assert gr.f64[()].shape == () and gr.bf16[4].shape == (4,)
    rng = np.random.default_rng(1)
    x = gr.f32[50, 4].example(rng)
    assert x.shape == (50, 4) and x.dtype == np.float32 and 0.5 < x.std() < 1.5
    idx = gr.i64[1000](low=3, high=27).example(rng)
    assert idx.dtype == np.int64 and idx.min() >= 3 and idx.max() < 27 and len(set(idx.tolist())) == 24
    with pytest.raises(ModelFileError, match="high="):
        gr.i64[3].example(rng)
    with pytest.raises(ModelFileError, match="non-negative"):
        gr.f32[3, -1]
    with pytest.raises(ModelFileError, match="integer specs"):
        gr.f32[3](high=2)


def test_example_args_from_annotations_are_fixed_and_follow_grad_flags():
    def loss(x: gr.f32[4, 3](grad=False), y: gr.i32[4](high=3), w: gr.f32[3], b: gr.f64, scale=2.0):
        return gr.sum(x @ w) * b * scale

    first, second = resolve_example(loss), resolve_example(loss)
    assert [np.shape(a) for a in first.args] == [(4, 3), (4,), (3,), ()]
    assert all(np.array_equal(a, b) for a, b in zip(first.args, second.args))
    assert first.argnums == (2, 3)
    assert default_argnums(first.args) == (0, 2, 3)  # without annotations: every float argument


def test_example_inputs_tuple_and_dict(tmp_path):
    as_tuple = _import(pathlib.Path(_write(tmp_path, "t.py", "def loss(a, b):\n    return a * b\n\n"
                                           "def example_inputs():\n    return (1.5, -2.0)\n")), "t_mod")
    assert example_args(as_tuple.loss, as_tuple) == (1.5, -2.0)
    as_dict = _import(pathlib.Path(_write(tmp_path, "d.py", "def loss(a, b):\n    return a * b\n\n"
                                          "def example_inputs():\n    return {'args': (1.0, 2.0), 'argnums': 1}\n")),
                      "d_mod")
    ex = resolve_example(as_dict.loss, as_dict)
    assert ex.args == (1.0, 2.0) and ex.argnums == (1,)
    wrong = _import(pathlib.Path(_write(tmp_path, "w.py", "def loss(a, b):\n    return a * b\n\n"
                                        "def example_inputs():\n    return (1.0,)\n")), "w_mod")
    with pytest.raises(ModelFileError, match="do not fit loss"):
        example_args(wrong.loss, wrong)


# -- schedule and memory commands -----------------------------------------------------------------

@pytest.mark.parametrize("policy", ["engine", "memory"])
def test_schedule_and_memory_commands_give_the_api_reports(policy):
    import json

    from gradir.cli.app import load_target

    t = load_target(str(MLP), None, None)
    j = gr.trace_grad(t.fn, *t.args, argnums=t.argnums, policy=policy)
    for what in ("schedule", "memory"):
        result = runner.invoke(app, [what, str(MLP), "--policy", policy, "--format", "json"])
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout) == json.loads(json.dumps(getattr(j, what).to_dict(), default=str))
    table = runner.invoke(app, ["memory", str(MLP), "--policy", policy])
    assert table.exit_code == 0 and "peak" in table.stdout


def test_trace_summarises_schedule_and_memory_and_rejects_unknown_policy():
    result = _trace(str(MLP))
    assert "engine policy" in result.stdout and "lower bound" in result.stdout
    bad = runner.invoke(app, ["schedule", str(MLP), "--policy", "fastest"])
    assert bad.exit_code == 2 and "unknown --policy 'fastest'" in bad.stderr and "Traceback" not in bad.stderr


# -- --viz --------------------------------------------------------------------------------------------

def test_trace_viz_writes_diagrams_plot_and_report(tmp_path):
    import xml.etree.ElementTree as ET

    result = _trace(str(MLP), "--viz", "--out", str(tmp_path))
    for suffix in ("forward.dot", "backward.dot", "joint.dot", "forward.svg", "backward.svg", "joint.svg",
                   "memory.svg", "html"):
        path = tmp_path / f"loss.{suffix}"
        assert path.exists() and str(path) in result.stdout
        if suffix.endswith("svg"):
            ET.parse(path)  # well-formed
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*"))  # atomic: no leftovers


def test_trace_viz_without_dot_still_writes_sources_and_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADIR_NO_DOT", "1")
    result = _trace(str(TANH), "--viz", "--out", str(tmp_path))
    assert (tmp_path / "loss.joint.dot").exists() and (tmp_path / "loss.html").exists()
    assert not (tmp_path / "loss.joint.svg").exists()
    assert "apt-get install graphviz" in result.stderr


def test_trace_passes_prints_the_graph_after_every_pass():
    result = _trace(str(TANH), "--passes")
    texts = GRAPH.findall(result.stdout)
    names = re.findall(r"after (\w+): \d+ nodes", result.stdout)
    assert names == ["trace", "autodiff", "lower_composites", "simplify", "cse", "dce"]
    assert len(texts) == len(names) + 2  # then the forward and backward programs
    graphs = [gr.Graph.parse(t).verify() for t in texts]
    tanh = _import(TANH, "cli_tanh_passes")
    assert str(graphs[0]) == str(gr.trace(tanh.loss, *tanh.example_inputs()))
    assert str(graphs[len(names) - 1]) == str(gr.trace_grad(tanh.loss, *tanh.example_inputs(), argnums=(0, 1)).joint)


def test_trace_out_into_an_unwritable_place_is_a_one_line_error():
    result = runner.invoke(app, ["trace", str(TANH), "--out", "/proc/gradir-cannot-write-here"])
    assert result.exit_code == 2 and "cannot write into" in result.stderr and "Traceback" not in result.stderr


def test_trace_backend_llvm_prints_the_fused_kernels():
    """`--backend llvm` adds the kernel listings: each kernel's loop nest and the IR nodes it covers,
    every forward and backward node in one kernel (views and constants cost no kernel)."""
    out = runner.invoke(app, ["trace", str(MLP), "--backend", "llvm"]).stdout
    assert "forward kernels (llvm)" in out and "backward kernels (llvm)" in out
    t = load_target(str(MLP), None, None)
    j = gr.trace_grad(t.fn, *t.args, argnums=t.argnums)
    for part, graph in (("forward", j.forward), ("backward", j.backward)):
        listing = str(j.kernels[part])
        assert listing in out
        covered = {line.split(" = ")[0].strip() for line in listing.splitlines() if line.startswith("    %")}
        names = {f"%{i}" for i, v in enumerate(graph.all_values()) if v.op not in ("input", "const", *VIEWS)}
        assert covered == names
    bad = runner.invoke(app, ["trace", str(MLP), "--backend", "cuda"])
    assert bad.exit_code != 0 and "unknown --backend 'cuda'" in bad.stderr


# -- errors name the model file's line, the same way in trace and check (issue 9) -----------------------

VECTOR_LOSS = "import gradir as gr\n\n\ndef loss(x: gr.f32[3]):\n    y = x * 2.0\n    return y\n"  # y at line 5
MISMATCH = "import gradir as gr\n\n\ndef loss(x: gr.f32[3], w: gr.f32[4, 5]):\n    y = x @ w\n    return gr.sum(y)\n"


@pytest.mark.parametrize("command", ["trace", "check", "memory", "schedule"])
def test_a_non_scalar_loss_is_located_at_the_model_line_computing_it(tmp_path, command):
    """Not at the launcher ("gradir:8") nor at the test calling the CLI: the model file's line 5."""
    path = _write(tmp_path, "vector.py", VECTOR_LOSS)
    err = _error([command, path])
    assert err.startswith(f"gradir: error: {path}:5: ShapeError: ") and "one scalar" in err and "[3]" in err, err
    assert "test_cli.py" not in err and "(at " not in err


def test_the_console_script_names_the_model_line_too(tmp_path):
    """The reported bug: the installed `gradir` launcher's own line (gradir:8) was taken for the user's."""
    script = pathlib.Path(sys.executable).with_name("gradir")
    if not script.exists():
        pytest.skip("no installed gradir console script next to this Python")
    path = _write(tmp_path, "vector.py", VECTOR_LOSS)
    proc = subprocess.run([str(script), "trace", path], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith(f"gradir: error: {path}:5: ShapeError: "), proc.stderr
    assert "gradir:8" not in proc.stderr


@pytest.mark.parametrize("command", ["trace", "check"])
def test_trace_and_check_report_a_shape_error_alike(tmp_path, command):
    """check traces the function before running it on plain arrays for the differences, so a shape error
    is gradir's ShapeError at the model line (as trace gives it), not NumPy's gufunc message."""
    path = _write(tmp_path, "mismatch.py", MISMATCH)
    err = _error([command, path])
    assert err.startswith(f"gradir: error: {path}:5: ShapeError: matmul: inner dimensions differ: "), err
    assert "[3] @ " in err and "[4,5]" in err and "gufunc" not in err


def test_an_integer_argument_chosen_with_argnums_names_the_function(tmp_path):
    """No user line called trace_grad (the CLI did): the error points at the function's definition."""
    path = _write(tmp_path, "indexed.py", "import gradir as gr\n\n\ndef loss(x: gr.f64[3], n: gr.i64[3](high=5)):\n"
                  "    return gr.sum(x * n)\n")
    err = _error(["trace", path, "--argnums", "n"])
    assert err.startswith(f"gradir: error: {path}:4: NonDifferentiableError: trace_grad: argument n ")
    assert "integer dtype i64, which has no gradient" in err


def test_a_one_element_loss_of_shape_1_1_is_traced_and_checked(tmp_path):
    """gradir.core.seed's rule (one element, any shape, as torch's backward()): central differences judge it."""
    path = _write(tmp_path, "boxed.py", "import gradir as gr\n\n\ndef loss(x: gr.f64[3]):\n"
                  "    return gr.sum(x * x * x).reshape(1, 1)\n")
    checked = runner.invoke(app, ["check", path])
    assert checked.exit_code == 0 and "gradcheck passed: loss, 3 coordinates" in checked.stdout, checked.stderr
    traced = runner.invoke(app, ["trace", path])
    assert traced.exit_code == 0, traced.stderr
    forward, backward = _graphs(traced.stdout)
    x = np.array([0.5, -1.0, 2.0])
    loss, *saved = run(forward, [x])
    assert np.shape(loss) == (1, 1) and backward.inputs[-1].shape == (1, 1)  # the cotangent has the loss's shape
    assert float(np.asarray(loss).item()) == pytest.approx(0.125 - 1 + 8, rel=1e-12)
    (dx,) = run(backward, saved + [np.ones((1, 1))])
    np.testing.assert_allclose(dx, 3 * x * x, rtol=1e-12)  # d/dx sum(x^3) = 3x^2, by hand


# -- the output folder (--out) --------------------------------------------------------------------------

SCOPED = ("import gradir as gr\n\n\ndef loss(x: gr.f64[4]):\n    for k in range(30):\n"
          "        with gr.scope(f'layer{k}'):\n            x = gr.tanh(x) * 0.5 + x\n    return gr.sum(x)\n")


def test_trace_out_is_checked_before_the_model_is_even_loaded(tmp_path):
    marker = tmp_path / "imported"
    model = tmp_path / "model.py"
    model.write_text(f"open({str(marker)!r}, 'w').close()\nimport gradir as gr\n\n\ndef loss(x: gr.f64[2]):\n"
                     "    return gr.sum(x * x)\n")
    (tmp_path / "afile").write_text("not a folder")
    result = runner.invoke(app, ["trace", str(model), "--viz", "--out", str(tmp_path / "afile" / "sub")])
    assert result.exit_code == 2 and "cannot write into" in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists()  # failed at once: no tracing, no drawing


def test_a_rerun_into_the_same_folder_replaces_the_previous_runs_files(tmp_path):
    """A big scoped model (region diagrams) and then a small one of the same function name: the
    folder holds exactly the second run's files (its manifest lists them) and the user's own file."""
    import json

    big = tmp_path / "big.py"
    big.write_text(SCOPED)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    _trace(str(big), "--viz", "--out", str(out))
    first = json.loads((out / "loss.manifest.json").read_text())
    assert any("layer" in f for f in first["files"]) and first["model"] == str(big)
    _trace(str(TANH), "--viz", "--out", str(out))
    second = json.loads((out / "loss.manifest.json").read_text())
    assert second["status"] == "complete" and second["model"] == str(TANH)
    assert sorted(p.name for p in out.iterdir()) == sorted([*second["files"], "loss.manifest.json", "notes.txt"])
    assert not any("layer" in p.name for p in out.iterdir())
    assert {"loss.forward.ir", "loss.html", "loss.joint.svg"} <= set(second["files"])


def test_ctrl_c_while_writing_says_what_was_and_was_not_written(tmp_path, monkeypatch):
    import json

    from gradir.viz import plots

    def interrupt(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(plots, "memory_timeline_bytes", interrupt)  # after the diagrams, before plot and page
    result = runner.invoke(app, ["trace", str(TANH), "--viz", "--out", str(tmp_path)])
    assert result.exit_code == 130 and "Traceback" not in result.stderr
    manifest = json.loads((tmp_path / "loss.manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    on_disk = sorted(p.name for p in tmp_path.iterdir() if p.name != "loss.manifest.json")
    assert sorted(manifest["files"]) == on_disk and "loss.joint.svg" in on_disk and "loss.html" not in on_disk
    assert (f"gradir: interrupted; wrote {len(on_disk)} files into {tmp_path} (listed in loss.manifest.json, "
            "marked interrupted); not written: loss.memory.svg, loss.html") in result.stderr


def test_ctrl_c_while_tracing_writes_nothing_and_keeps_the_earlier_run(tmp_path, monkeypatch):
    _trace(str(TANH), "--viz", "--out", str(tmp_path))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def interrupt(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli_app, "trace_grad", interrupt)  # where the command looks it up
    result = runner.invoke(app, ["trace", str(TANH), "--viz", "--out", str(tmp_path)])
    assert result.exit_code == 130
    assert f"gradir: interrupted; nothing was written into {tmp_path} (an earlier run's files there are untouched)" \
        in result.stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


# -- reports: summaries on a terminal, everything with --full / --limit / --format / --output ---------

def _report_run(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result.stdout


def _mlp_trace():
    t = load_target(str(MLP), None, None)
    return gr.trace_grad(t.fn, *t.args, argnums=t.argnums)


def test_report_csv_and_json_give_every_row():
    import csv
    import io
    import json

    j = _mlp_trace()
    for what in ("schedule", "saved", "memory"):
        d = getattr(j, what).to_dict()
        assert json.loads(_report_run(what, MLP, "--format", "json")) == json.loads(json.dumps(d, default=str))
        rows = list(csv.DictReader(io.StringIO(_report_run(what, MLP, "--format", "csv"))))
        assert len(rows) == len(d["steps" if what != "saved" else "entries"])
    steps = list(csv.DictReader(io.StringIO(_report_run("memory", MLP, "--format", "csv"))))
    assert [int(r["live_bytes"]) for r in steps] == j.memory.live_bytes


def test_output_file_is_written_atomically_with_what_would_be_printed(tmp_path):
    for fmt in ("table", "json", "csv"):
        path = tmp_path / f"schedule.{fmt}"
        said = _report_run("schedule", MLP, "--format", fmt, "--output", path)
        assert said.strip() == f"wrote {path}"
        assert path.read_text() == _report_run("schedule", MLP, "--format", fmt)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["schedule.csv", "schedule.json", "schedule.table"]
    bad = runner.invoke(app, ["schedule", str(MLP), "--output", str(tmp_path / "schedule.csv" / "x")])
    assert bad.exit_code == 2 and "cannot write" in bad.stderr and "Traceback" not in bad.stderr


def test_limit_summarizes_and_says_how_to_see_everything():
    j = _mlp_trace()
    out = _report_run("schedule", MLP, "--limit", "6")
    rows = [line for line in out.splitlines() if line[:5].strip().isdigit()]
    assert [int(r.split()[0]) for r in rows] == [0, 1, 2, len(j.backward.nodes) - 3, len(j.backward.nodes) - 2,
                                                  len(j.backward.nodes) - 1]
    gap = next(line for line in out.splitlines() if "not shown" in line)
    assert gap.startswith(f"… {len(j.backward.nodes) - 6} steps not shown (3 to {len(j.backward.nodes) - 4})")
    assert "--full" in gap and "--output FILE" in gap
    # the IR listings of trace are summarized the same way
    traced = _report_run("trace", MLP, "--limit", "10")
    assert traced.count("lines not shown") == 2 and "graph loss_forward {" in traced


def test_a_terminal_gets_a_summary_that_fits_and_full_gets_every_row(monkeypatch):
    from gradir.cli import reports as cli_reports

    j = _mlp_trace()
    monkeypatch.setattr(cli_reports, "TERMINAL_ROWS", 10)
    monkeypatch.setattr(cli_reports, "terminal_width", lambda: 80)
    out = _report_run("memory", MLP)
    assert max(map(len, out.splitlines())) <= 80
    assert "not shown" in out and "<- peak" in out  # the peak row survives the summary
    full = _report_run("memory", MLP, "--full")
    steps = [line for line in full.splitlines() if line.startswith(("forward ", "backward "))]
    assert len(steps) == len(j.memory.order) and "not shown" not in full
    assert max(map(len, full.splitlines())) <= 80


def test_trace_says_saved_for_backward_once_and_names_one_step_numbering():
    j = _mlp_trace()
    out = _trace(str(MLP)).stdout
    assert out.count(f"{j.saved.count} values") == 1  # the summary's line, not again as the table's title
    m = j.memory
    k = m.peak_step - len(j.forward.nodes)
    assert f"at backward step {k} (%{j.backward.number(j.schedule.order[k])} " in out
    assert f"backward steps 0 to {len(j.backward.nodes) - 1}" in out and "ready queue up to" not in out


def test_trace_json_and_refused_csv():
    import json

    j = _mlp_trace()
    data = json.loads(_report_run("trace", MLP, "--format", "json"))
    assert gr.Graph.parse(data["backward"]).verify() is not None
    assert data["saved"]["count"] == j.saved.count and data["memory"]["peak_bytes"] == j.memory.peak_bytes
    bad = runner.invoke(app, ["trace", str(MLP), "--format", "csv"])
    assert bad.exit_code == 2 and "gradir saved, schedule or memory --format csv" in bad.stderr


def test_trace_folds_a_composite_op_into_one_line_and_full_lists_its_lowered_ops(tmp_path):
    path = _write(tmp_path, "ce.py", "import gradir as gr\n\n\ndef loss(x: gr.f32[8, 5], w: gr.f32[5, 3], "
                  "y: gr.i64[8](high=3)):\n    logits = gr.tanh(x @ w)\n    return gr.nn.cross_entropy(logits, y)\n")
    full = _graphs(_trace(path, "--full").stdout)[0]  # the lowered form, as it runs
    lowered = [v for v in full.nodes if v.source == "ce.py:6"]
    numbers = [full.number(v) for v in lowered]
    assert numbers == list(range(numbers[0], numbers[-1] + 1)) and len(lowered) > 10
    inside = set(lowered)
    later = [full.number(v) for v in lowered[:-1]
             if any(v is o for o in full.outputs) or any(i is v for u in full.nodes if u not in inside for i in u.inputs)]
    out = _trace(path).stdout
    forward = out[out.index("graph loss_forward {"):out.index("}")]
    folded = [line.strip() for line in forward.splitlines() if "cross_entropy" in line]
    logits = next(full.number(v) for v in full.nodes if v.op == "tanh")
    assert folded == [f"%{numbers[0]}..%{numbers[-1]} = cross_entropy %{logits}, y : f32[]  # ce.py:6 "
                      f"({len(lowered)} ops lowered: --full lists them; {' '.join(f'%{k}' for k in later)} used later)"]
    assert len(forward.splitlines()) == len(full.to_text().splitlines()) - 1 - (len(lowered) - 1)
