"""`with gr.debug_nans():` / GRADIR_DEBUG_NANS=1 (gradir.core.nan_check): the first op, forward or backward, whose
output holds a NaN raises NonFiniteError naming the op and this file's line; eager ops and Tensor.backward(),
the NumPy reference (gr.grad / gr.value_and_grad / gr.vjp), and compiled LLVM code (its NaN results run again
on the reference to find the op). A NaN that comes in through an input is named as the input. Off: nothing
raised, the same results. And `gradir check` names NaN / inf example inputs instead of blaming the gradient."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import threading

import numpy as np
import pytest
from conftest import triton_missing
from typer.testing import CliRunner

import gradir as gr
from gradir.cli.app import app
from gradir.core.nan_check import NAN_CHECKS

HERE = pathlib.Path(__file__).name
NEG = np.array([-1.0, 2.0])


def at(fn, offset: int = 1) -> str:
    """`test_debug_nans.py:LINE` of the line `offset` lines below `fn`'s `def`."""
    return f"{HERE}:{fn.__code__.co_firstlineno + offset}"


def raised(call) -> gr.NonFiniteError:
    with gr.debug_nans(), pytest.raises(gr.NonFiniteError) as e:
        call()
    return e.value


def log_sum(x):
    return gr.sum(gr.log(x))


def zero_over_zero(x):
    y = x - x
    return y / y


def sqrt_of_square(x):  # sqrt(x * x) at 0: forward 0, backward (1 / (2 * sqrt(0))) * 2x = inf * 0
    sq = x * x
    return gr.sqrt(sq)


# -- traced, on the NumPy reference ----------------------------------------------------------------------------


def test_forward_log_of_a_negative_in_grad():
    e = raised(lambda: gr.grad(log_sum)(NEG))
    assert isinstance(e, gr.GradirError) and e.op == "log" and e.source == at(log_sum) and e.input is None
    assert str(e).startswith("log: produced NaN (1 of 2 elements)") and str(e).endswith(f"(at {at(log_sum)})")


def test_forward_zero_over_zero_in_value_and_grad():
    e = raised(lambda: gr.value_and_grad(zero_over_zero)(3.0))
    assert e.op == "divide" and e.source == at(zero_over_zero, 2)


def test_backward_nan_in_grad_points_at_the_forward_line():
    assert gr.grad(sqrt_of_square)(2.0) == pytest.approx(1.0)  # only at 0 is it NaN
    e = raised(lambda: gr.grad(sqrt_of_square)(0.0))  # the forward is finite: the NaN is made in backward
    assert e.op == "multiply" and e.source == at(sqrt_of_square)  # x * x's VJP: inf * x
    with gr.debug_nans():
        assert sqrt_of_square(np.float64(0.0)) == 0.0  # the forward alone is fine


def test_backward_nan_in_a_vjp_zero_times_inf():
    out, f = gr.vjp(gr.sqrt, np.array([0.0, 4.0]))
    assert np.isnan(f(np.array([0.0, 1.0]))[0][0])  # off: 0 * inf is NaN, silently
    with gr.debug_nans():
        out, f = gr.vjp(gr.sqrt, np.array([0.0, 4.0]))  # the forward holds no NaN
        with pytest.raises(gr.NonFiniteError) as e:
            f(np.array([0.0, 1.0]))
    assert e.value.op == "multiply" and e.value.input is None


def test_an_input_nan_is_named_not_blamed():
    x = np.array([1.0, np.nan, 3.0])
    e = raised(lambda: gr.grad(log_sum)(x))
    assert e.input == "x" and e.op is None and "input `x` (1 of 3 elements)" in str(e) and "`log`" in str(e)
    e = raised(lambda: gr.grad(lambda a, b: gr.sum(a * b), argnums=1)(np.ones(2), np.array([0.0, np.nan])))
    assert e.input == "b"
    _, f = gr.vjp(gr.sqrt, np.array([4.0]))
    e = raised(lambda: f(np.array([np.nan])))  # a NaN cotangent is an input of the backward program
    assert e.input == "ct0" and e.op is None


# -- compiled (LLVM) -------------------------------------------------------------------------------------------


def test_compiled_llvm_nan_result_is_located_on_the_reference():
    compiled = gr.compile(log_sum)
    assert compiled.backend == "llvm"
    e = raised(lambda: compiled(NEG))
    assert e.op == "log" and e.source == at(log_sum)
    grad = gr.compile(gr.grad(sqrt_of_square))
    assert grad(np.float64(3.0)) == pytest.approx(1.0)
    e = raised(lambda: grad(np.float64(0.0)))  # the NaN made in the compiled backward
    assert e.op == "multiply" and e.source == at(sqrt_of_square)
    assert np.isnan(compiled(NEG)) and np.isnan(grad(np.float64(0.0)))  # off again: NaN results, no error
    e = raised(lambda: gr.compile(lambda x: x * 2.0)(np.array([np.nan, 1.0])))
    assert e.input == "x" and e.op is None
    e = raised(lambda: gr.compile(lambda x: x)(np.array([np.nan])))  # passed through: no op at all
    assert e.input == "x"


def test_compiled_numpy_backend_too():
    e = raised(lambda: gr.compile(zero_over_zero, backend="numpy")(np.array([1.0, 2.0])))
    assert e.op == "divide" and e.source == at(zero_over_zero, 2)


def test_compiled_triton_backend_too():
    if triton_missing():
        pytest.skip(triton_missing())
    compiled = gr.compile(log_sum, backend="triton")  # Triton's CPU interpreter here (conftest), a GPU elsewhere
    e = raised(lambda: compiled(NEG))
    assert e.op == "log" and e.source == at(log_sum)
    e = raised(lambda: gr.compile(lambda x: x * 2.0, backend="triton")(np.array([np.nan, 1.0])))
    assert e.input == "x" and e.op is None


# -- eager -----------------------------------------------------------------------------------------------------


def eager_log(t):
    return t.log()


def eager_sqrt_of_square(t):
    sq = t * t
    return gr.sqrt(sq).sum()


def test_eager_tensor_forward():
    e = raised(lambda: eager_log(gr.Tensor(NEG)))
    assert e.op == "log" and e.source == at(eager_log)
    e = raised(lambda: gr.divide(gr.Tensor(0.0), gr.Tensor(0.0)))
    assert e.op == "divide" and e.source.startswith(f"{HERE}:")
    e = raised(lambda: gr.log(np.array([-1.0])))  # gr ops on NumPy arrays are eager too
    assert e.op == "log"
    e = raised(lambda: gr.Tensor(np.array([np.nan, 1.0])) + 1.0)  # a NaN in a leaf: an input
    assert e.op is None and e.input == "operand 0 of add" and "did not make it" in str(e)


def test_eager_tensor_backward():
    x = gr.Tensor(np.array([0.0, 2.0]), requires_grad=True)
    with gr.debug_nans():
        loss = eager_sqrt_of_square(x)  # finite: the NaN comes in backward
        with pytest.raises(gr.NonFiniteError) as e:
            loss.backward()
    assert e.value.op == "multiply" and e.value.source == at(eager_sqrt_of_square)
    assert "its backward produced NaN" in str(e.value) and "operand" in str(e.value)
    y = gr.Tensor(np.array([0.0]), requires_grad=True)
    eager_sqrt_of_square(y).backward()  # off: a NaN gradient, no error
    assert np.isnan(y.grad.data[0])
    z = gr.Tensor(np.array([1.0]), requires_grad=True)
    with gr.debug_nans():
        out = z * 2.0
        with pytest.raises(gr.NonFiniteError) as e:
            out.backward(gradient=np.array([np.nan]))
    assert e.value.input == "the gradient passed to backward()"


def eager_sqrt_minus_sqrt(t):
    return (t.sqrt() - t.sqrt()).sum()  # at 0 the two gradients reaching t are inf and -inf


def test_eager_backward_leaf_sum():
    x = gr.Tensor(np.array([0.0]), requires_grad=True)
    with gr.debug_nans():
        loss = eager_sqrt_minus_sqrt(x)
        with pytest.raises(gr.NonFiniteError) as e:
            loss.backward()
    assert e.value.op == "add" and e.value.source == at(eager_sqrt_minus_sqrt) and e.value.input is None
    assert "leaf tensor f64[1]" in str(e.value) and "add up to NaN" in str(e.value)
    assert str(e.value).count("`sqrt`") == 2 and x.grad is None  # the ops whose gradients met; nothing accumulated
    with gr.debug_nans(), pytest.raises(gr.NonFiniteError) as e:  # gr.grad on the same function: its `add`
        gr.grad(lambda t: gr.sum(gr.sqrt(t) - gr.sqrt(t)))(np.array([0.0]))
    assert e.value.op == "add"
    eager_sqrt_minus_sqrt(x).backward()  # off: a NaN gradient, no error
    assert np.isnan(x.grad.data[0])


# -- the switch ------------------------------------------------------------------------------------------------


def test_nested_context_managers_restore_the_setting():
    base = NAN_CHECKS.get()
    f = gr.grad(log_sum)
    with gr.debug_nans():
        with gr.debug_nans(False):
            assert np.isnan(f(NEG)).sum() == 0 and np.isnan(gr.log(np.array(-1.0)))  # off inside
        with pytest.raises(gr.NonFiniteError):
            f(NEG)  # on again
        with pytest.raises(gr.NonFiniteError), gr.debug_nans():  # left by an exception: restored all the same
            f(NEG)
        with pytest.raises(gr.NonFiniteError):
            gr.log(np.array(-1.0))
    assert NAN_CHECKS.get() == base and np.isnan(gr.log(np.array(-1.0)))  # off after


def _checks_on() -> bool:
    """Whether this thread's checks are on, seen by an op (and the setting agrees)."""
    try:
        gr.log(np.array(-1.0))
        on = False
    except gr.NonFiniteError:
        on = True
    assert NAN_CHECKS.get() is on
    return on


def test_the_setting_is_per_thread():
    base = NAN_CHECKS.get()
    step = threading.Barrier(2, timeout=30)
    seen: dict[str, list] = {"on": [], "off": []}
    errors = []

    def on_thread():  # enters first, leaves while the other thread is still inside its block
        step.wait()
        with gr.debug_nans():
            step.wait()  # 1: entered
            step.wait()  # 2: the other has entered too
            seen["on"].append(_checks_on())
            step.wait()  # 3
        step.wait()  # 4: left, the other still inside
        seen["on"].append(_checks_on())
        step.wait()  # 5: the other has left too
        seen["on"].append(_checks_on())

    def off_thread():  # enters after, leaves last
        step.wait()
        step.wait()  # 1: the other is inside debug_nans()
        seen["off"].append(_checks_on())
        with gr.debug_nans(False):
            step.wait()  # 2: entered
            step.wait()  # 3: the other checked
            step.wait()  # 4: the other has left (with a shared stack it popped this thread's entry)
            seen["off"].append(_checks_on())
        step.wait()  # 5
        seen["off"].append(_checks_on())

    def guarded(fn):
        def go():
            try:
                fn()
            except BaseException as e:  # reported below; the barrier breaks for the other thread
                errors.append(e)
                step.abort()
        return go

    threads = [threading.Thread(target=guarded(f)) for f in (on_thread, off_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert seen["on"] == [True, base, base]  # on inside its block although the other thread turned checks off
    assert seen["off"] == [base, False, base]  # off while the other thread had them on, and after it left
    assert NAN_CHECKS.get() == base  # this thread's setting untouched


def test_a_shared_instance_in_two_threads():
    checks, step, seen = gr.debug_nans(), threading.Barrier(2, timeout=30), []

    def work():
        with checks:
            step.wait()  # both inside
        step.wait()  # both left, in either order
        seen.append(NAN_CHECKS.get())

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert seen == [NAN_CHECKS.get()] * 2 and checks._tokens == []


def test_off_no_error_and_the_same_results():
    x = np.array([0.5, 1.5, 2.5])
    fns = [gr.value_and_grad(log_sum), gr.compile(gr.value_and_grad(log_sum))]
    off = [f(x) for f in fns]
    with gr.debug_nans():
        on = [f(x) for f in fns]
    for (v0, g0), (v1, g1) in zip(off, on):
        assert v0 == v1 and np.array_equal(g0, g1)
    v, g = gr.value_and_grad(log_sum)(NEG)  # off: NaN comes back as a value
    assert np.isnan(v) and np.array_equal(g, [-1.0, 0.5])
    assert np.isnan(gr.compile(log_sum)(NEG))


def test_environment_variable():
    code = ("import numpy as np, gradir as gr\n"
            "try:\n    gr.grad(lambda x: gr.sum(gr.log(x)))(np.array([-1.0]))\n"
            "except gr.NonFiniteError as e:\n    print('raised', e.op)\n"
            "with gr.debug_nans(False):\n    print('off', gr.log(np.array(-1.0)))\n")
    env = dict(os.environ, GRADIR_DEBUG_NANS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["raised log", "off nan"]


# -- gradir check ----------------------------------------------------------------------------------------------

MODEL = """import numpy as np
import gradir as gr


def loss(x, w):
    return gr.sum(gr.tanh(x * w))


def example_inputs():
    return (np.array([1.0, {x}, 2.0]), np.array([0.5, 0.5, {w}]))
"""


def _check(tmp_path, x: str, w: str):
    path = tmp_path / "nan_model.py"
    path.write_text(MODEL.format(x=x, w=w))
    return CliRunner().invoke(app, ["check", str(path)])


def test_cli_check_names_nonfinite_example_inputs(tmp_path):
    assert _check(tmp_path, "3.0", "0.5").exit_code == 0
    result = _check(tmp_path, "np.nan", "0.5")
    assert result.exit_code == 2, result.output
    assert "x holds NaN (1 of 3 elements, first at x[1])" in result.output and "gradcheck failed" not in result.output
    result = _check(tmp_path, "3.0", "np.inf")  # inf fails the check (inf * 0 in d/dx): the input is named
    assert result.exit_code == 2 and "w holds inf (1 of 3 elements, first at w[2])" in result.output
    assert "gradcheck failed" not in result.output
