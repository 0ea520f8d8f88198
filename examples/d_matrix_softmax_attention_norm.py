"""D. Matrix rules, softmax, attention and normalisation, checked by hand-derived rules.

1. Y = X W. With upstream G = dL/dY: dX = G W^T and dW = X^T G (shapes force the transposes).
2. Softmax cross-entropy: p = softmax(z), L = -log p[target], dL/dz = p - onehot(target) (sums to 0).
   At logits [1000, 999, 998] a naive exp overflows to inf and p becomes nan (gradir's eager ops
   return the IEEE result, without warnings); the max-shifted softmax (`gr.nn.softmax`) is fine.
3. One attention head, D = 2, scale 1/sqrt(D): S = Q K^T / sqrt(D), A = softmax(S), O = A V.
   Backward: dV = A^T G, dA = G V^T, dS = A * (dA - rowsum(dA * A)), dQ = dS K / sqrt(D),
   dK = dS^T Q / sqrt(D). Each intermediate cotangent is exposed by a `gr.vjp` of the sub-function
   that produces it; chained, they equal the VJP of the whole head. Then a causal mask
   (S -> where(mask, S, -inf)): masked positions get probability 0 and gradient 0, and nothing is NaN.
4. LayerNorm of x = [1, 2, 4] (biased variance, eps = 1e-5) with `gr.nn.layer_norm`: the statistics,
   xhat, and dx, dgamma, dbeta by `gr.vjp`, next to the hand rule
   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = upstream * gamma.
5. A residual block y = x + F(LN(x)), with F(h) = tanh(h Wf) for a fixed 3x3 Wf chosen here:
   the gradient reaches x by two routes (the identity, and through F and LN); both are shown and
   they add up to the gradient of the whole block.

Run:  python examples/d_matrix_softmax_attention_norm.py
"""

from __future__ import annotations

import math

import numpy as np

import gradir as gr

# 1. matmul
X = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
W = np.array([[1.0, -1.0], [2.0, 0.0], [0.5, 3.0]])
G_Y = np.array([[1.0, 2.0], [-1.0, 0.5]])
# 2. softmax cross-entropy
LOGITS = np.array([2.0, 0.5, -1.0])
TARGET = 0
BIG_LOGITS = np.array([1000.0, 999.0, 998.0])
# 3. attention
Q = np.array([[1.0, 0.0], [0.5, 1.0]])
K = np.array([[1.0, 1.0], [0.0, 2.0]])
V = np.array([[2.0, -1.0], [0.0, 3.0]])
G_O = np.array([[1.0, -0.5], [-1.0, 2.0]])
D = Q.shape[1]
CAUSAL = np.tril(np.ones((2, 2), dtype=bool))  # query i sees keys j <= i
# 4. layer norm
LN_X = np.array([1.0, 2.0, 4.0])
GAMMA = np.array([0.5, 1.5, -1.0])
BETA = np.array([0.25, -0.5, 1.0])
LN_UP = np.array([1.0, -2.0, 0.5])
EPS = 1e-5
# 5. residual block: F(h) = tanh(h @ WF), WF chosen for this example
WF = np.array([[0.5, -1.0, 0.25], [1.0, 0.5, -0.5], [-0.25, 0.75, 1.0]])

# The course's figures (TEACHING.md, section D), as the course writes them; each is printed beside ours
# (a vector's or matrix's on the line after ours).
COURSE = {
    "Y": "[[6.5,8],[17,14]]", "dX": "[[-1,2,6.5],[-1.5,-2,1]]", "dW": "[[-3,4],[-3,6.5],[-3,9]]",
    "p": "[0.785597034589, 0.175290392140, 0.039112573271]", "L": "0.241311296657",
    "dL/dz": "[-0.214402965411, 0.175290392140, 0.039112573271]", "dL/dz sum": "~0",
    "naive": "naive exp overflows (clear error or inf, shown)",
    "stable": "[0.665240955775, 0.244728471055, 0.090030573170]",
    "A": "[[0.6698,0.3302],[0.4125,0.5875]]", "O": "[[1.3395,0.3210],[0.8250,1.3499]]",
    "dV": "[[0.2572,0.4902],[-0.2572,1.0098]]", "dA": "[[2.5,-1.5],[-4,6]]",
    "dS": "[[0.8847,-0.8847],[-2.4235,2.4235]]", "dQ": "[[0.6256,-0.6256],[-1.7137,1.7137]]",
    "dK": "[[-0.2312,-1.7137],[0.2312,1.7137]]", "dS rows": "~0",
    "mask": "masked positions get zero probability and zero gradient, no NaN",
    "mean": "2.333333333333", "var": "1.555555555556", "rstd": "0.801781148588",
    "xhat": "[-1.069041531450,-0.267260382863,1.336301914313]", "dx": "[1.088132295123,-1.632197154115,0.544064858993]",
    "dgamma": "[-1.069041531450,0.534520765725,0.668150957156]", "dbeta": "[1,-2,0.5]",
}


def the_course(figure: str, reason: str = "") -> str:
    """The course's figure, to append to the line of ours; a reason where ours differs or is a bound."""
    return f"  (the course: {figure}{'; ' + reason if reason else ''})"


def course_line(key: str) -> str:
    """The course's vector or matrix, for the line after ours."""
    return "   " + the_course(COURSE[key])


def fmt(a, digits=4) -> str:
    return np.array2string(np.asarray(a), precision=digits, floatmode="fixed", suppress_small=True)


# -- 1. matmul ----------------------------------------------------------------------------------------


def matmul_part(say) -> dict:
    Y, vjp_fn = gr.vjp(lambda X, W: X @ W, X, W)
    dX, dW = vjp_fn(G_Y)
    say("== 1. Y = X W ==")
    say(f"Y = {fmt(Y, 1)}\n{course_line('Y')}\ndX = G W^T = {fmt(dX, 1)}\n{course_line('dX')}")
    say(f"dW = X^T G = {fmt(dW, 1)}\n{course_line('dW')}")
    return {"Y": Y, "dX": dX, "dW": dW}


# -- 2. softmax cross-entropy ---------------------------------------------------------------------


def softmax_part(say) -> dict:
    p = gr.nn.softmax(LOGITS)
    target = np.array(TARGET)
    L, dz = gr.value_and_grad(lambda z: gr.nn.cross_entropy(z, target))(LOGITS)
    e = gr.exp(BIG_LOGITS)                     # naive: exp(1000) overflows to inf ...
    naive = gr.divide(e, gr.sum(e))            # ... and inf / inf = nan
    stable = gr.nn.softmax(BIG_LOGITS)         # shifted by the max first: exp(0), exp(-1), exp(-2)
    say("\n== 2. softmax cross-entropy ==")
    say(f"p = {fmt(p, 12)}\n{course_line('p')}\nL = {float(L):.12f}{the_course(COURSE['L'])}")
    say(f"dL/dz = {fmt(dz, 12)}\n{course_line('dL/dz')}")
    say(f"sum of dL/dz = {float(np.sum(dz)):.1e}{the_course(COURSE['dL/dz sum'])}")
    say(f"logits {BIG_LOGITS}: naive exp = {e}{the_course(COURSE['naive'])}")
    say(f"  naive softmax = exp / sum(exp) = inf / inf = {naive}")
    say(f"stable softmax = {fmt(stable, 12)}\n{course_line('stable')}")
    return {"p": p, "L": float(L), "dL_dz": dz, "dL_dz_sum": float(np.sum(dz)), "naive_exp": e,
            "naive_softmax": naive, "stable_softmax": stable}


# -- 3. attention -----------------------------------------------------------------------------------


def scores(Q, K):
    return Q @ gr.transpose(K) * (1.0 / math.sqrt(D))


def probs(S, mask=None):
    if mask is not None:
        S = gr.where(mask, S, -np.inf)  # masked scores: exp(-inf) = 0 probability
    return gr.nn.softmax(S, axis=-1)


def mix(A, V):
    return A @ V


def head(Q, K, V, mask=None):
    return mix(probs(scores(Q, K), mask), V)


def attention(mask=None) -> dict:
    """Forward and backward of one head, each cotangent exposed by the VJP of its sub-function."""
    S, vjp_s = gr.vjp(scores, Q, K)
    A, vjp_a = gr.vjp(lambda S: probs(S, mask), S)
    O, vjp_o = gr.vjp(mix, A, V)
    dA, dV = vjp_o(G_O)
    (dS,) = vjp_a(dA)
    dQ, dK = vjp_s(dS)
    O_whole, vjp_whole = gr.vjp(lambda Q, K, V: head(Q, K, V, mask), Q, K, V)
    whole = vjp_whole(G_O)
    chain_vs_whole = max(float(np.max(np.abs(a - b))) for a, b in zip((dQ, dK, dV), whole))
    return {"S": S, "A": A, "O": O, "dV": dV, "dA": dA, "dS": dS, "dQ": dQ, "dK": dK,
            "dS_row_sums": dS.sum(axis=1), "chain_vs_whole": chain_vs_whole,
            "any_nan": any(bool(np.isnan(v).any()) for v in (A, O, dA, dS, dQ, dK, dV, *whole))}


def attention_part(say) -> dict:
    plain, causal = attention(), attention(CAUSAL)
    for title, r in (("one attention head, no mask", plain), ("causal mask", causal)):
        say(f"\n== 3. {title} ==")
        for k in ("A", "O", "dV", "dA", "dS", "dQ", "dK"):
            say(f"{k:2s} = {fmt(r[k])}")
            if r is plain:
                say(course_line(k))
        sums = ", ".join(f"{x:.1e}" for x in r["dS_row_sums"])
        say(f"rows of dS sum to {sums}{the_course(COURSE['dS rows']) if r is plain else ''}")
        say(f"chained VJPs vs whole-head VJP: {r['chain_vs_whole']:.1e}; any NaN: {r['any_nan']}")
        if r is causal:
            masked = ~CAUSAL
            say(f"masked positions (above the diagonal): A = {fmt(r['A'][masked], 1)}, dS = {fmt(r['dS'][masked], 1)}, "
                f"any NaN: {r['any_nan']}")
            say(course_line("mask"))
    return {"attention": plain, "causal": causal}


# -- 4. layer norm ----------------------------------------------------------------------------------


def layer_norm(x, gamma, beta):
    return gr.nn.layer_norm(x, gamma, beta, eps=EPS)


def layer_norm_part(say) -> dict:
    mean = gr.mean(LN_X)
    var = gr.var(LN_X)                 # biased (divides by n), as LayerNorm uses
    rstd = gr.rsqrt(var + EPS)
    xhat = (LN_X - mean) * rstd
    y, vjp_fn = gr.vjp(layer_norm, LN_X, GAMMA, BETA)
    dx, dgamma, dbeta = vjp_fn(LN_UP)
    dxhat = LN_UP * GAMMA              # the hand-derived rule, for comparison
    dx_hand = rstd * (dxhat - dxhat.mean() - xhat * (dxhat * xhat).mean())
    say("\n== 4. LayerNorm ==")
    say(f"mean {float(mean):.12f}{the_course(COURSE['mean'])}")
    say(f"var  {float(var):.12f}{the_course(COURSE['var'])}")
    say(f"rstd {float(rstd):.12f}{the_course(COURSE['rstd'])}")
    say(f"xhat   = {fmt(xhat, 12)}\n{course_line('xhat')}\ny      = {fmt(y, 12)}")
    say(f"dx     = {fmt(dx, 12)}\n{course_line('dx')}\ndgamma = {fmt(dgamma, 12)}\n{course_line('dgamma')}")
    say(f"dbeta  = {fmt(dbeta, 12)}\n{course_line('dbeta')}")
    say(f"hand rule rstd*(dxhat - mean(dxhat) - xhat*mean(dxhat*xhat)) differs by {np.max(np.abs(dx - dx_hand)):.1e}")
    return {"mean": float(mean), "var": float(var), "rstd": float(rstd), "xhat": xhat, "y": y, "dx": dx,
            "dgamma": dgamma, "dbeta": dbeta, "dx_hand": dx_hand}


# -- 5. residual ------------------------------------------------------------------------------------


def branch(x):
    return gr.tanh(layer_norm(x, GAMMA, BETA) @ WF)


def block(x):
    return x + branch(x)


def residual_part(say) -> dict:
    y, vjp_block = gr.vjp(block, LN_X)
    (total,) = vjp_block(LN_UP)
    _, vjp_branch = gr.vjp(branch, LN_X)
    (via_branch,) = vjp_branch(LN_UP)
    direct = LN_UP                      # the identity route passes the upstream gradient unchanged
    say("\n== 5. residual y = x + tanh(LN(x) Wf) ==")
    say(f"y = {fmt(y, 6)}\ndirect route (identity)  = {fmt(direct, 6)}\nroute through F(LN(x))   = {fmt(via_branch, 6)}")
    say(f"sum of routes            = {fmt(direct + via_branch, 6)}\ngradient of the block    = {fmt(total, 6)}")
    return {"y": y, "direct": direct, "via_branch": via_branch, "total": total,
            "routes_vs_total": float(np.max(np.abs(direct + via_branch - total)))}


def main(verbose: bool = True) -> dict:
    say = print if verbose else (lambda *a, **k: None)
    out = {"matmul": matmul_part(say), "softmax": softmax_part(say)}
    out.update(attention_part(say))
    out["layer_norm"] = layer_norm_part(say)
    out["residual"] = residual_part(say)
    say("\nPictures: notebooks/d_matrix_softmax_attention_norm.py shows the attention head's forward/backward report "
        "with the schedule player inline.")
    return out


if __name__ == "__main__":
    main()
