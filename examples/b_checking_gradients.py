"""B. Checking a gradient: directional checks, a negative control, cross-entropy, every op.

1. Directional check of L(x) = sum(tanh(A x)^2), A a fixed 6x8 matrix: along five random unit
   directions v, the central difference (L(x+hv) - L(x-hv))/2h at h = 1e-5 against g . v.
   Setup chosen here: A and x from np.random.default_rng(0) (standard normal), directions from
   seed 1 (`gr.checks.directional(..., seed=1)`).
2. Negative control: add 0.1 to coordinate 3 of the gradient. A check of coordinate 0 alone still
   reports ~0 error (it never looks at coordinate 3); every random direction sees the error,
   0.1 * |v_3|, because a random direction has a non-zero component on every coordinate.
3. Cross-entropy (`gr.nn.cross_entropy`, summed over a batch of 4 rows, 5 classes, fixed seeded
   logits) by central differences against the closed form p - y.
4. `gr.checks.gradcheck` of every differentiable primitive in the op library, in reverse mode (VJP
   rules) and forward mode (JVP rules), float64, at points away from kinks. The list is enumerated
   from `gradir.core.primitive.REGISTRY`, so a new primitive without an input recipe shows up as MISSING
   instead of being skipped silently.

Run:  python examples/b_checking_gradients.py
"""

from __future__ import annotations

import numpy as np

import gradir as gr
from gradir.api import checks
from gradir.core.primitive import REGISTRY
from gradir.core.trace import bind
from gradir.ops.conv import fold, unfold
from gradir.ops.lifting import lift

DATA_SEED, DIRECTION_SEED, H = 0, 1, 1e-5

# The course's figures (TEACHING.md, section B), as the course writes them; each is printed beside ours.
COURSE = {"every error": "<= ~2e-10", "coordinate 0": "0", "directional, corrupted": "~4e-3..7e-2"}
ACCURACY = 2e-10  # the course's bound on a correct gradient's errors: what "0 to the check's accuracy" means here


def the_course(figure: str, reason: str = "") -> str:
    """The course's figure, to append to the line of ours; a reason where ours differs or is a bound."""
    return f"  (the course: {figure}{'; ' + reason if reason else ''})"


_rng = np.random.default_rng(DATA_SEED)
A = _rng.standard_normal((6, 8))
X0 = _rng.standard_normal(8)


def L(x):
    return gr.sum(gr.tanh(A @ x) ** 2)


# -- 1./2. directional checks and the negative control -------------------------------------------------


def directional_part(say) -> dict:
    g = gr.grad(L)(X0)
    good = checks.directional(L, X0, n=5, h=H, seed=DIRECTION_SEED)
    bad_g = g.copy()
    bad_g[3] += 0.1
    e0 = np.eye(X0.size)[0]
    coord0 = checks.directional(L, X0, h=H, grad=bad_g, directions=[e0])
    bad = checks.directional(L, X0, n=5, h=H, seed=DIRECTION_SEED, grad=bad_g)
    good.what, bad.what = "gr.grad(L)", "gr.grad(L) with coordinate 3 corrupted by +0.1"
    say(f"the function under test: L(x) = sum(tanh(A @ x) ** 2), A a fixed {A.shape[0]}x{A.shape[1]} matrix, at a point "
        f"x0 of {X0.size} values; its gradient gr.grad(L)(x0) against central differences along random unit directions")
    say(good)
    within = "within" if good.max_error <= ACCURACY else "OUTSIDE"
    say(f"every error <= {good.max_error:.1e}{the_course(COURSE['every error'], f'a bound, ours is {within} it')}")
    say("negative control: gradient coordinate 3 corrupted by +0.1")
    say(f"  coordinate-0 check, e_0 never looks at coordinate 3: numeric {coord0[0].numeric:.12f} "
        f"vs analytic {coord0[0].analytic:.12f}, error {coord0[0].error:.1e}")
    why = (f"ours is 0 to the check's accuracy ({ACCURACY:.0e}), as the uncorrupted checks' errors above are"
           if coord0[0].error <= ACCURACY else f"ours is above the check's accuracy ({ACCURACY:.0e})")
    say(f"  {the_course(COURSE['coordinate 0'], why)}")
    say(bad)
    bad_errors, bad_v3 = [r.error for r in bad], [abs(r.direction[3]) for r in bad]
    off = max(abs(e - 0.1 * v3) for e, v3 in zip(bad_errors, bad_v3))
    say(f"corrupted checks' errors {min(bad_errors):.2e}..{max(bad_errors):.2e}"
        f"{the_course(COURSE['directional, corrupted'], 'a range over random directions, ours inside it')}")
    say(f"  each is 0.1 * |v_3| (the corruption seen along v) to within {off:.1e}")
    return {"grad": g, "errors": [r.error for r in good], "coordinate0_error": coord0[0].error,
            "bad_errors": bad_errors, "bad_v3": bad_v3, "bad_vs_v3": off,
            "directions": [r.direction for r in good], "max_error": good.max_error}


# -- 3. cross-entropy -----------------------------------------------------------------------------------


def cross_entropy_part(say) -> dict:
    rng = np.random.default_rng(DATA_SEED + 2)
    logits = rng.standard_normal((4, 5)) * 2
    targets = np.array([1, 0, 4, 2])
    loss = lambda z: gr.nn.cross_entropy(z, targets, reduction="sum")
    numeric = checks.central_difference(loss, logits)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    closed = p - np.eye(5)[targets]
    analytic = gr.grad(loss)(logits)
    say("\ncross-entropy, 4 rows x 5 classes (summed): central differences vs p - y")
    rows = [checks.cmp("numeric vs p-y", numeric, closed), checks.cmp("gr.grad vs p-y", analytic, closed)]
    return {"numeric_vs_closed": rows[0].maxdiff, "grad_vs_closed": rows[1].maxdiff, "logits": logits,
            "targets": targets, "numeric": numeric}


# -- 4. every op ----------------------------------------------------------------------------------------


def op_recipes() -> dict:
    """One input recipe per differentiable primitive: (function of float args that applies the
    primitive, float args, gradcheck options). Points keep clear of kinks and singularities:
    abs/relu away from 0, log/sqrt/rsqrt/power on positives, max/min/maximum/minimum without ties."""
    r = np.random.default_rng(7)

    def u(*shape):
        return r.uniform(-1.0, 1.0, size=shape)

    def pos(*shape):
        return r.uniform(0.5, 2.0, size=shape)

    def away(*shape):  # |x| in [0.3, 1.5]
        return r.choice([-1.0, 1.0], size=shape) * r.uniform(0.3, 1.5, size=shape)

    def spread(*shape):  # distinct values, >= 0.25 apart
        return (r.permutation(int(np.prod(shape))).reshape(shape) * 0.3 + r.uniform(0, 0.05, size=shape))

    x34 = u(3, 4)
    eye3 = 3 * np.eye(3)

    def sym(a):
        return (a + gr.linalg.matrix_transpose(a)) / 2

    idx = np.array([2, 0, 2, 1])
    mask = r.random((3, 4)) > 0.5
    targets = np.array([1, 0, 4, 2])
    unary = {name: (lambda x, name=name: bind(name, x), [u(3, 4)])
             for name in ("negative", "exp", "tanh", "sigmoid", "sin", "cos", "erf")}
    return {
        **{k: (f, a, {}) for k, (f, a) in unary.items()},
        "abs": (lambda x: bind("abs", x), [away(3, 4)], {}),
        "relu": (lambda x: bind("relu", x), [away(3, 4)], {}),
        "log": (lambda x: bind("log", x), [pos(3, 4)], {}),
        "sqrt": (lambda x: bind("sqrt", x), [pos(3, 4)], {}),
        "rsqrt": (lambda x: bind("rsqrt", x), [pos(3, 4)], {}),
        "add": (lambda x, y: bind("add", x, y), [u(3, 4), u(3, 4)], {}),
        "subtract": (lambda x, y: bind("subtract", x, y), [u(3, 4), u(3, 4)], {}),
        "multiply": (lambda x, y: bind("multiply", x, y), [u(3, 4), u(3, 4)], {}),
        "divide": (lambda x, y: bind("divide", x, y), [u(3, 4), away(3, 4)], {}),
        "power": (lambda x, y: bind("power", x, y), [pos(3, 4), u(3, 4) * 2], {}),
        "maximum": (lambda x, y: bind("maximum", x, y), [x34, x34 + away(3, 4)], {}),
        "minimum": (lambda x, y: bind("minimum", x, y), [x34, x34 + away(3, 4)], {}),
        "where": (lambda x, y: bind("where", lift(mask), x, y), [u(3, 4), u(3, 4)], {}),
        # f64 -> f32 -> f64: the rounding to float32 limits what central differences can resolve
        "convert": (lambda x: bind("convert", bind("convert", x, dtype=gr.float32), dtype=gr.float64), [u(3, 4)],
                    {"h": 1e-3, "atol": 1e-3, "rtol": 1e-3}),
        "sum": (lambda x: bind("sum", x, axes=(0,), keepdims=True), [u(3, 4)], {}),
        "prod": (lambda x: bind("prod", x, axes=(1,), keepdims=False), [away(3, 4)], {}),
        "cumsum": (lambda x: bind("cumsum", x, axis=1, reverse=False), [u(3, 4)], {}),
        "max": (lambda x: bind("max", x, axes=(1,), keepdims=False), [spread(3, 4)], {}),
        "min": (lambda x: bind("min", x, axes=(0,), keepdims=True), [spread(3, 4)], {}),
        "matmul": (lambda a, b: bind("matmul", a, b), [u(2, 2, 3), u(2, 3, 2)], {}),
        "reshape": (lambda x: bind("reshape", x, shape=(4, 3)), [u(2, 6)], {}),
        "transpose": (lambda x: bind("transpose", x, perm=(2, 0, 1)), [u(2, 3, 4)], {}),
        "broadcast_to": (lambda x: bind("broadcast_to", x, shape=(2, 3, 4)), [u(3, 1)], {}),
        "slice": (lambda x: bind("slice", x, starts=(1, 0), stops=(4, 5), steps=(2, 2)), [u(4, 5)], {}),
        "pad": (lambda x: bind("pad", x, lo=(1, 0), hi=(0, 2), interior=(1, 1), value=0.0), [u(2, 3)], {}),
        "concatenate": (lambda x, y: bind("concatenate", x, y, axis=1), [u(2, 3), u(2, 2)], {}),
        "take": (lambda x: gr.take(x, idx, axis=0), [u(5, 3)], {}),
        "index_add": (lambda g: bind("index_add", g, lift(idx), axis=0, size=5), [u(4, 3)], {}),
        "update_slice": (lambda x, v: bind("update_slice", x, v, starts=(1, 0), stops=(4, 5), steps=(2, 2)),
                         [u(4, 5), u(2, 3)], {}),
        "index_update": (lambda x, v: bind("index_update", x, lift(np.array([2, 0])), v, axis=0), [u(4, 3), u(2, 3)], {}),
        "unfold": (lambda x: unfold(x, 3, stride=1, padding=1), [u(1, 2, 4, 4)], {}),
        "fold": (lambda c: fold(c, (3, 3), 2), [u(1, 2, 2, 2, 2, 2)], {}),
        "cross_entropy": (lambda z: gr.nn.cross_entropy(z, targets), [u(4, 5) * 2], {}),
        "batch_norm": (lambda x, w, b: gr.nn.batch_norm(x, w, b), [u(4, 3), pos(3), u(3)], {}),
        # (added last, so the draws above keep their values) domains narrower than the generic [0.5, 1.5]
        "arcsin": (lambda x: bind("arcsin", x), [u(3, 4) * 0.9], {}),
        "arccos": (lambda x: bind("arccos", x), [u(3, 4) * 0.9], {}),
        "arccosh": (lambda x: bind("arccosh", x), [pos(3, 4) + 1.0], {}),
        "erfinv": (lambda x: bind("erfinv", x), [u(3, 4) * 0.9], {}),
        "polygamma": (lambda x: bind("polygamma", lift(np.full((3, 4), 2.0)), x), [pos(3, 4)], {}),
        # matrices kept well conditioned (3I added), symmetric where the factorization needs it
        "inv": (lambda a: bind("inv", a), [u(3, 3) + eye3], {}),
        "det": (lambda a: bind("det", a), [u(2, 3, 3) + eye3], {}),
        "logabsdet": (lambda a: bind("logabsdet", a), [u(3, 3) + eye3], {}),
        "solve": (lambda a, b: bind("solve", a, b), [u(3, 3) + eye3, u(3, 2)], {}),
        "solve_triangular": (lambda a, b: bind("solve_triangular", a, b, lower=True), [u(3, 3) + eye3, u(3, 2)], {}),
        "cholesky": (lambda a: bind("cholesky", sym(a)), [u(3, 3) + eye3], {}),
        "qr_q": (lambda a: bind("qr_q", a), [u(4, 3)], {}),
        "qr_r": (lambda a: bind("qr_r", a), [u(3, 4)], {}),
        "eigh_values": (lambda a: bind("eigh_values", sym(a)), [u(3, 3)], {}),
        "eigh_vectors": (lambda a: bind("eigh_vectors", sym(a)), [u(3, 3)], {}),
        "svd_u": (lambda a: bind("svd_u", a), [u(4, 3)], {}),
        "svd_s": (lambda a: bind("svd_s", a), [u(4, 3)], {}),
        "svd_vh": (lambda a: bind("svd_vh", a), [u(3, 4)], {}),
        "cumprod": (lambda x: bind("cumprod", x, axis=0), [u(3, 4)], {}),
        "logcumsumexp": (lambda x: bind("logcumsumexp", x, axis=1, reverse=False), [u(3, 4)], {}),
        "index_reduce": (lambda v: bind("index_reduce", v, lift(np.array([2, 0, 2, 1, 2])), size=4, reduce="prod"),
                         [u(5)], {}),
    }


def _generic_recipe(name: str):
    """Elementwise primitives of one or two float operands need no special recipe."""
    prim = REGISTRY[name]
    if prim.kind != "elementwise" or prim.args not in (("x",), ("x", "y")):
        return None
    r = np.random.default_rng(11)
    return (lambda *xs: bind(name, *xs), [r.uniform(0.5, 1.5, size=(3, 4)) for _ in prim.args], {})


def check_op(name: str, recipe) -> dict:
    """gradcheck one primitive: loss = sum(op(args) * w) with fixed random weights w (so each output
    element gets a different cotangent), reverse and forward mode against central differences."""
    fn, args, opts = recipe
    w = np.random.default_rng(3).uniform(0.5, 1.5, size=np.shape(fn(*args)))
    loss = lambda *a: gr.sum(fn(*a) * w)
    try:
        used = {n.op for n in gr.trace(loss, *args).nodes}
    except gr.GradirError as e:
        return {"status": f"ERROR: {e}", "max_err": np.nan}
    if name not in used:
        return {"status": f"recipe does not apply {name} (traced ops: {sorted(used)})", "max_err": np.nan}
    nums = tuple(range(len(args)))
    try:
        checks.gradcheck(loss, *args, argnums=nums, modes=("rev", "fwd"), **opts)
        status = "pass"
    except checks.GradcheckError as e:
        status = f"FAIL: {e}"
    except gr.GradirError as e:
        return {"status": f"ERROR: {e}", "max_err": np.nan}
    grads = gr.grad(loss, argnums=nums)(*args)
    err = max(float(np.max(np.abs(np.asarray(g) - checks.central_difference(loss, *args, argnum=i, h=opts.get("h", 1e-6)))))
              for i, g in enumerate(grads))
    return {"status": status, "max_err": err, "shapes": [np.shape(a) for a in args]}


def ops_part(say) -> dict:
    recipes = op_recipes()
    differentiable = sorted(n for n, p in REGISTRY.items() if p.differentiable)
    skipped = sorted(n for n, p in REGISTRY.items() if not p.differentiable)
    results = {}
    for name in differentiable:
        recipe = recipes.get(name) or _generic_recipe(name)
        results[name] = check_op(name, recipe) if recipe else {"status": "MISSING: no input recipe", "max_err": np.nan}
    say(f"\ngradcheck of {len(differentiable)} differentiable primitives (float64, reverse + forward mode):")
    for name, res in results.items():
        shapes = " ".join("x".join(map(str, s)) or "()" for s in res.get("shapes", []))
        say(f"  {name:14s} {shapes:24s} max |analytic - numeric| {res['max_err']:.1e}  {res['status']}")
    say(f"not differentiable (no gradient defined): {', '.join(skipped)}")
    return {"ops": results, "skipped": skipped}


def main(verbose: bool = True) -> dict:
    say = print if verbose else (lambda *a, **k: None)
    out = {"directional": directional_part(say), "cross_entropy": cross_entropy_part(say)}
    out.update(ops_part(say))
    say("\nPictures: notebooks/b_checking_gradients.py shows the function's graph and its backward program inline.")
    return out


if __name__ == "__main__":
    main()
