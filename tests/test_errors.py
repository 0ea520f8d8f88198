"""Errors are part of the API: each is a gradir exception naming the op and the user's source line
(this file), never a bare NumPy traceback."""

from __future__ import annotations

import os

import numpy as np
import pytest

import gradir as gr
from gradir.core.errors import (
    AxisError,
    DTypeError,
    GradirError,
    NonDifferentiableError,
    ShapeError,
    TracedControlFlowError,
    TraceError,
    UnsupportedOpError,
)
from gradir.core.primitive import get_primitive

HERE = os.path.basename(__file__)


def user_line(excinfo) -> str:
    """`test_errors.py:LINE` of the deepest frame of this file in the traceback: the line that
    made the bad call (inside a traced function, the line in that function)."""
    lines = [entry.lineno + 1 for entry in excinfo.traceback if os.path.basename(str(entry.path)) == HERE]
    return f"{HERE}:{lines[-1]}"


def check_located(excinfo, op: str | None):
    """The error names `op` (when given) and the line of this file that caused it, in attributes and text."""
    err = excinfo.value
    assert isinstance(err, GradirError)
    assert err.source == user_line(excinfo), f"source {err.source!r}, expected {user_line(excinfo)!r}"
    assert err.source in str(err)
    if op is not None:
        assert err.op == op
        assert str(err).startswith(f"{op}: ")


# -- shape mismatches ------------------------------------------------------------------------------
def test_add_shape_mismatch_eager():
    with pytest.raises(ShapeError, match=r"f64\[3\] and f64\[4\] cannot be broadcast") as ei:
        gr.add(np.ones(3), np.ones(4))
    check_located(ei, "add")


def test_add_shape_mismatch_traced():
    def loss(x):
        y = x * 2.0
        return gr.sum(y + np.ones(4))  # the offending line

    with pytest.raises(ShapeError) as ei:
        gr.grad(loss)(np.ones(3))
    check_located(ei, "add")
    assert user_line(ei).endswith(str(loss.__code__.co_firstlineno + 2))


@pytest.mark.parametrize("a,b,pattern", [((2, 3), (4, 5), "inner dimensions differ"),
                                         ((3,), (4,), "inner dimensions differ"),
                                         ((2, 2, 3), (3, 3, 1), "batch dimensions"),
                                         ((), (3,), "0-d")])
def test_matmul_shape_mismatch(a, b, pattern):
    with pytest.raises(ShapeError, match=pattern) as ei:
        gr.matmul(np.ones(a), np.ones(b))
    check_located(ei, "matmul")

    def f(x):
        return gr.sum(x @ np.ones(b))

    with pytest.raises(ShapeError, match=pattern) as ei:
        gr.grad(f)(np.ones(a))
    check_located(ei, "matmul")


@pytest.mark.parametrize("shape", [(4, 2), (-1, 4), (-1, -1), (0, -1)], ids=str)
def test_reshape_mismatch(shape):
    with pytest.raises(ShapeError) as ei:
        gr.reshape(np.ones((2, 3)), shape)
    check_located(ei, "reshape")
    with pytest.raises(ShapeError) as ei:
        gr.trace(lambda x: x.reshape(shape), np.ones((2, 3)))
    check_located(ei, "reshape")


def test_concatenate_mismatch():
    with pytest.raises(ShapeError, match="differ off axis") as ei:
        gr.concatenate([np.ones((2, 3)), np.ones((2, 4))], axis=0)
    check_located(ei, "concatenate")
    with pytest.raises(ShapeError) as ei:
        gr.concatenate([np.ones((2, 3)), np.ones((3,))])
    check_located(ei, "concatenate")
    with pytest.raises(ShapeError) as ei:
        gr.concatenate([])
    check_located(ei, "concatenate")
    with pytest.raises(ShapeError) as ei:
        gr.trace(lambda a, b: gr.concatenate([a, b], axis=1), np.ones((2, 3)), np.ones((3, 3)))
    check_located(ei, "concatenate")


# -- axes ------------------------------------------------------------------------------------------
BAD_AXES = {
    "sum": lambda x: gr.sum(x, axis=2),
    "mean": lambda x: gr.mean(x, axis=(0, -3)),
    "max": lambda x: gr.max(x, axis=(1, -1)),  # repeated
    "min": lambda x: gr.min(x, axis=5, keepdims=True),
    "var": lambda x: gr.var(x, axis=-3),
    "logsumexp": lambda x: gr.logsumexp(x, axis=2),
    "argmax": lambda x: gr.argmax(x, axis=2),
    "transpose": lambda x: gr.transpose(x, (0, 2)),
    "expand_dims": lambda x: gr.expand_dims(x, 4),
    "squeeze": lambda x: gr.squeeze(x, 2),
    "concatenate": lambda x: gr.concatenate([x, x], axis=2),
    "split": lambda x: gr.split(x, 2, axis=-3),
    "take": lambda x: gr.take(x, np.array([0]), axis=3),
}


@pytest.mark.parametrize("op", BAD_AXES)
def test_bad_axis(op):
    f = BAD_AXES[op]
    with pytest.raises(AxisError) as ei:
        f(np.ones((2, 3)))
    check_located(ei, op)
    with pytest.raises(AxisError) as ei:
        gr.trace(f, np.ones((2, 3)))
    check_located(ei, op)


def test_squeeze_of_a_long_axis():
    with pytest.raises(ShapeError, match="cannot squeeze axis 1 of size 3") as ei:
        gr.squeeze(np.ones((1, 3)), 1)
    check_located(ei, "squeeze")


# -- unknown ops -----------------------------------------------------------------------------------
def test_unknown_op_is_an_unsupported_op_error():
    with pytest.raises(UnsupportedOpError, match="no primitive named 'nope'") as ei:
        get_primitive("nope")
    assert ei.value.op == "nope"


def test_unknown_op_names_the_user_line():
    with pytest.raises(UnsupportedOpError) as ei:
        get_primitive("nope")
    check_located(ei, "nope")


def test_unknown_op_in_parsed_ir():
    text = "graph f {\n  %0 = input name='x' : f64[]\n  %1 = nope %0 : f64[]\n  return %1\n}"
    with pytest.raises(GradirError) as ei:
        gr.Graph.parse(text).verify()
    assert ei.value.op == "nope"


# -- Python control flow on traced values ----------------------------------------------------------
def _branchy(x):
    if x > 0:  # traced: a bool() of a traced comparison
        return x
    return -x


@pytest.mark.parametrize("transform", ["grad", "trace", "jvp", "vjp", "compile"])
def test_if_on_a_traced_value(transform):
    run = {
        "grad": lambda: gr.grad(_branchy)(1.0),
        "trace": lambda: gr.trace(_branchy, 1.0),
        "jvp": lambda: gr.jvp(_branchy, (1.0,), (1.0,)),
        "vjp": lambda: gr.vjp(_branchy, 1.0),
        "compile": lambda: gr.compile(_branchy)(1.0),
    }[transform]
    with pytest.raises(TracedControlFlowError) as ei:
        run()
    check_located(ei, "greater")
    line = f"{HERE}:{_branchy.__code__.co_firstlineno + 1}"
    assert ei.value.source == line
    assert line in str(ei.value) and "gr.where" in str(ei.value)


def test_while_and_boolean_operators_on_traced_values():
    def loop(x):
        while x < 10.0:
            x = x * 2.0
        return x

    with pytest.raises(TracedControlFlowError, match="gr.where") as ei:
        gr.grad(loop)(1.0)
    check_located(ei, "less")

    def both(x, y):
        return x if (x > 0) and (y > 0) else y

    with pytest.raises(TracedControlFlowError) as ei:
        gr.grad(both)(1.0, 2.0)
    check_located(ei, "greater")


@pytest.mark.parametrize("convert", [float, int, bool, lambda v: np.asarray(v), lambda v: np.exp(v),
                                     lambda v: [0, 1, 2][v]],
                         ids=["float", "int", "bool", "np.asarray", "np.exp", "index"])
def test_python_conversions_of_traced_values(convert):
    def f(x):
        y = gr.tanh(x)
        return convert(y)

    with pytest.raises(TracedControlFlowError) as ei:
        gr.grad(f)(0.5)
    check_located(ei, "tanh")


def test_float_of_a_traced_value_suggests_where():
    with pytest.raises(TracedControlFlowError, match=r"float\(\)") as ei:
        gr.grad(lambda x: float(x * 3.0))(2.0)
    check_located(ei, "multiply")
    assert "gr.where" in str(ei.value)


# -- differentiation errors ------------------------------------------------------------------------
@pytest.mark.parametrize("arg", [np.arange(3), np.array([True, False]), 3], ids=["int64", "bool", "python-int"])
def test_grad_of_a_non_float_input(arg):
    why = "(integer dtype i64|dtype bool|is the integer 3), which has no gradient"
    with pytest.raises(NonDifferentiableError, match=why) as ei:
        gr.grad(lambda x: gr.sum(x * 2.0))(arg)
    assert ei.value.op == "grad"


def test_grad_of_a_non_float_input_names_the_call_line():
    with pytest.raises(NonDifferentiableError) as ei:
        gr.grad(lambda x: gr.sum(x * 2.0))(np.arange(3))
    check_located(ei, "grad")


def test_grad_of_a_non_scalar_output():
    with pytest.raises(ShapeError, match=r"one scalar.*f64\[3\].*gr.vjp") as ei:
        gr.grad(lambda x: x * 2.0)(np.ones(3))
    check_located(ei, "grad")
    with pytest.raises(ShapeError, match="one scalar") as ei:
        gr.grad(lambda x: (gr.sum(x), gr.sum(x)))(np.ones(3))
    check_located(ei, "grad")


def test_vjp_cotangent_of_the_wrong_shape():
    _, vjp_fn = gr.vjp(lambda x: x * 2.0, np.ones(3))
    with pytest.raises(ShapeError, match="cotangent shape") as ei:
        vjp_fn(np.ones(4))
    check_located(ei, "vjp")


def test_argnums_out_of_range():
    with pytest.raises(GradirError, match="argnums 2") as ei:
        gr.grad(lambda a, b: a * b, argnums=2)(1.0, 2.0)
    check_located(ei, "grad")


def test_traced_value_used_after_its_trace():
    leaked = []

    def f(x):
        leaked.append(x)
        return gr.sum(x)

    gr.grad(f)(np.ones(2))
    with pytest.raises(TraceError) as ei:
        gr.exp(leaked[0])
    check_located(ei, "exp")


# -- no bare NumPy exception leaks -----------------------------------------------------------------
x23 = np.arange(6.0).reshape(2, 3)
BAD_CALLS = {  # id: (call, the op the error must name); gr.getitem(x, i) is what x[i] runs when x is traced
    "index out of range": (lambda x: gr.getitem(x, 2), "getitem"),
    "negative index out of range": (lambda x: gr.getitem(x, (slice(None), -4)), "getitem"),
    "array index out of range": (lambda x: gr.getitem(x, np.array([0, 2])), "getitem"),
    "too many indices": (lambda x: gr.getitem(x, (0, 0, 0)), "getitem"),
    "two ellipses": (lambda x: gr.getitem(x, (..., ...)), "getitem"),
    "bool mask": (lambda x: gr.getitem(x, np.array([True, False])), "getitem"),
    "float index": (lambda x: gr.getitem(x, 1.5), "getitem"),
    "float array index": (lambda x: gr.take(x, np.array([0.5])), "take"),
    "take out of range": (lambda x: gr.take(x, np.array([3]), axis=1), "take"),
    "broadcast_to": (lambda x: gr.broadcast_to(x, (3, 3)), "broadcast_to"),
    "pad width": (lambda x: gr.pad(x, ((1, 1), (1, 1), (1, 1))), "pad"),
    "negative pad": (lambda x: gr.pad(x, -1), "pad"),
    "split unevenly": (lambda x: gr.split(x, 2, axis=1), "split"),
    "stack mismatch": (lambda x: gr.stack([x, x[:, :2]]), "concatenate"),
    "transpose length": (lambda x: gr.transpose(x, (0,)), "transpose"),
    "one_hot of floats": (lambda x: gr.one_hot(x, 3), "one_hot"),
    "unknown dtype": (lambda x: gr.astype(x, "float7"), "astype"),
    "int to negative int power": (lambda x: gr.power(np.arange(3), -1), "power"),
    "subtract of bools": (lambda x: gr.subtract(x > 1, x > 2), "subtract"),
    "where shapes": (lambda x: gr.where(x > 1, x, np.ones(4)), "where"),
    "matmul of bools": (lambda x: gr.matmul(x > 1, (x > 1).T), "matmul"),
}


@pytest.mark.parametrize("name", BAD_CALLS)
@pytest.mark.parametrize("mode", ["eager", "traced"])
def test_no_bare_numpy_errors(name, mode):
    call, op = BAD_CALLS[name]
    with pytest.raises(GradirError) as ei:
        if mode == "eager":
            call(x23)
        else:
            gr.trace(call, x23)
    check_located(ei, op)


def test_errors_are_also_standard_exception_types():
    """Code catching ValueError/TypeError keeps working (and pytest.raises(ValueError) still passes)."""
    assert issubclass(ShapeError, ValueError) and issubclass(AxisError, ValueError)
    assert issubclass(DTypeError, TypeError)
    for cls in (ShapeError, AxisError, DTypeError, UnsupportedOpError, TracedControlFlowError,
                NonDifferentiableError, TraceError):
        assert issubclass(cls, GradirError)


def test_run_time_failures_are_gradir_errors_naming_the_node():
    from gradir.core.errors import ExecutionError

    f = gr.compile(lambda x, idx: gr.sum(x[idx]))
    with pytest.raises(ExecutionError) as ei:
        f(np.ones(3), np.array([0, 7]))  # index 7 only known at run time
    assert ei.value.op == "take" and ei.value.source.startswith("test_errors.py:")
    with pytest.raises(ExecutionError) as ei:
        gr.grad(lambda x, idx: gr.sum(x[idx]))(np.ones(3), np.array([5]))
    assert ei.value.op == "take"


@pytest.mark.parametrize("call", [lambda x: gr.sum(x, axis=1.0), lambda x: gr.sum(x, axis="a"),
                                  lambda x: gr.reshape(x, "ab"), lambda x: gr.reshape(x, (2.0, 3))])
def test_malformed_axes_and_shapes_are_gradir_errors(call):
    x = np.ones((2, 3))
    with pytest.raises(GradirError) as ei:
        call(x)
    assert ei.value.source.startswith("test_errors.py:")


def test_calling_with_the_wrong_number_of_arguments_is_a_gradir_error():
    from gradir.core.errors import TraceError

    with pytest.raises(TraceError, match="cannot call") as ei:
        gr.compile(lambda a, b: a * b)(1.0)
    assert ei.value.source.startswith("test_errors.py:")


# -- gr.grad's argument and output errors (issue 9) -----------------------------------------------


def test_grad_of_a_python_int_says_the_argument_has_no_gradient():
    """Not "the output is i64": the integer argument is the problem, and a float is the fix."""
    with pytest.raises(NonDifferentiableError, match=r"argument n is the integer 3, which has no gradient: "
                                                     r"pass a float \(3\.0\)") as ei:
        gr.grad(lambda n: n * n)(3)
    check_located(ei, "grad")
    assert "output" not in str(ei.value)
    assert gr.grad(lambda n: n * n)(3.0) == 6.0  # d/dn n^2 = 2n, by hand
    with pytest.raises(NonDifferentiableError, match="argument k is the integer 2") as ei:
        gr.grad(lambda x, k: x ** k, argnums=(0, 1))(1.5, 2)
    check_located(ei, "grad")
    with pytest.raises(NonDifferentiableError, match="argument n is the integer 3") as ei:
        gr.trace_grad(lambda n: n * n, 3)
    check_located(ei, "trace_grad")


def test_grad_of_a_non_scalar_output_points_at_the_line_computing_it():
    def f(x):
        y = x * 2.0
        return y

    with pytest.raises(ShapeError, match=r"one scalar.*got f64\[3\]") as ei:
        gr.grad(f)(np.ones(3))
    assert ei.value.source == f"{HERE}:{f.__code__.co_firstlineno + 1}"  # the line computing y
    assert ei.value.source in str(ei.value)
    with pytest.raises(ShapeError, match=r"one scalar.*got f64\[3\]") as ei:
        gr.grad(lambda x: x)(np.ones(3))  # an input returned as is: no line computed it, so the call's line
    check_located(ei, "grad")
