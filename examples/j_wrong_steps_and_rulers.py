"""J (part 1). Wrong steps a cmp table catches, and zero and constant gradients as rulers.

The makemore MLP of example F (`f_makemore_backprop.py`, imported, not copied: block 3, n_embd 10,
n_hidden 64, BatchNorm with the unbiased variance, 4,137 parameters, batch of 32) is backpropagated
by hand one atomic step at a time, and every intermediate's gradient is compared with gradir's
autodiff of the same flattened forward in a cmp table (exact / approximate / maxdiff). The hand
backward here is F's, with three mistakes that can be switched on one at a time:

1. wrong axis: `counts_sum_inv` is (32, 1), one number per row, so its gradient sums
   `counts * dprobs` over axis 1. Summing over axis 0 gives a (1, 27) array; NumPy broadcasting
   carries it on without complaint (`dcounts_sum` becomes (32, 27)), but cmp reports the shape
   mismatch at once, at the first wrong row.
2. alias: `dlogits = dnorm_logits` without `.copy()`, then the in-place `dlogits += onehot * dlogit_maxes`
   changes dnorm_logits too. dlogits is right, dnorm_logits is now wrong: its row says exact False.
   The change is tiny because the gradient reaching the max is ~0 (ruler 3 below), which is why
   "exact" matters: approximate stays True.
3. biased variance: BatchNorm's forward divides by n-1 (unbiased), the mistaken backward of that
   step divides by n. dbndiff2 is off by exactly (n-1)/n = 31/32 (3.1%), and the only parameters it
   reaches (W1, C) move within 1% of the right step (0.2% for the whole update on names.txt); one SGD
   step with it lowers the loss almost exactly as much as the right step does, so a one-step check
   misses it. The table locates it: every row before bndiff2
   is exact, bndiff2 and everything computed from it are not.
In each table the first row (in backward order) that is not exact names the mistaken step.
(The parameter C is exact False, approximate True, even in the right backward: np.add.at sums the
rows of repeated characters in another order than gradir's scatter does.)

Rulers (the right backward): gradients that must be zero or a known constant.
- Mean cross-entropy over 32 examples: dlogprobs is -1/32 at each example's target and 0 elsewhere,
  so dlogprobs.sum() is exactly -1.0 (1/32 is a power of two: no rounding anywhere).
- Each row of dlogits = (softmax - onehot)/32 sums to ~0 (probabilities sum to 1, the one-hot to 1).
- The max subtracted for stability does not change the loss, so the gradient reaching it is ~0.
- The 1/p step (log's backward) pulls identical gradients apart: every target's dlogprobs is -1/n,
  dprobs = dlogprobs / p. Two examples, a confident guess p = 0.99 and a poor one p = 0.01:
  dprobs differ by a factor 0.99/0.01 = 99 ("the worse the guess, the harder the shove").

Data: names.txt (from `--data`, default ../shared/data/names.txt) gives the same batch as example F;
without it a built-in fallback is used (the first 20 names of names.txt, the same vocabulary of 27
symbols, the same initialisation and sampling), and the output says which.

Run:  python examples/j_wrong_steps_and_rulers.py [--data ../shared/data/names.txt]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

import gradir as gr
from gradir.core.errors import ShapeError

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import f_makemore_backprop as F  # noqa: E402 - the model, the flattened forward and the hand backward (with its mistakes)
from f_makemore_backprop import the_course  # noqa: E402 - the course's figure beside ours, one phrase

N_HIDDEN = 64
LR = 0.1
MISTAKES = F.MISTAKES  # switched on one at a time in F.backward_by_hand
FALLBACK_NAMES = ["emma", "olivia", "ava", "isabella", "sophia", "charlotte", "mia", "amelia", "harper", "evelyn",
                  "abigail", "emily", "elizabeth", "mila", "ella", "avery", "sofia", "camila", "aria", "scarlett"]
ROWS = [*reversed(F.STEPS[:-1]), *F.PARAMS]  # backward order, then the parameters
# The course's figures (TEACHING.md, section J), printed beside ours
COURSE = {"counts_sum_inv": "(32, 1)", "step": "a step within ~3%", "dlogprobs_sum": "-1.0", "row_sums": "~0",
          "max_grad": "~0", "factor": "a factor of 99"}


# -- the batch ----------------------------------------------------------------------------------------


def make_batch(data_path) -> dict:
    """Parameters and a batch of 32, as example F makes them (names.txt when present, else the fallback)."""
    rng = np.random.default_rng(F.SEED)
    if data_path is not None and pathlib.Path(data_path).is_file():
        data, vocab = F.splits(data_path)
        X, Y = data["train"]
        source = f"names.txt ({data_path}), the training split, as example F"
    else:
        stoi = {".": 0} | {ch: i + 1 for i, ch in enumerate("abcdefghijklmnopqrstuvwxyz")}
        X, Y = F.build_dataset(FALLBACK_NAMES, stoi)
        vocab = len(stoi)
        source = (f"built-in fallback: {len(FALLBACK_NAMES)} names ({len(Y)} examples; names.txt not found "
                  f"at {data_path})")
    p = F.init_params(vocab, N_HIDDEN, rng)
    Xb, Yb = F.sample_batch(X, Y, rng)
    return {"params": p, "Xb": Xb, "Yb": Yb, "vocab": vocab, "source": source}


# -- the cmp table ------------------------------------------------------------------------------------


def cmp_table(hand: dict, auto: dict) -> list[dict]:
    """One row per intermediate (backward order) and parameter: gr.checks.cmp's exact / approximate /
    maxdiff, or the shape mismatch cmp raises."""
    rows = []
    for name in ROWS:
        try:
            r = gr.checks.cmp(name, hand[name], auto[name], verbose=False)
            rows.append({"name": name, "exact": r.exact, "approximate": r.approximate, "maxdiff": r.maxdiff,
                         "shape_error": None})
        except ShapeError as e:
            rows.append({"name": name, "exact": False, "approximate": False, "maxdiff": None,
                         "shape_error": str(e).split("  (at ")[0]})
    return rows


def first_wrong(rows: list[dict]) -> str | None:
    """The first row, in backward order, that is not exact: where the mistake is."""
    return next((r["name"] for r in rows if not r["exact"]), None)


def format_table(rows: list[dict], mark: str | None = None) -> str:
    lines = [f"   {'name':15s} | exact | approximate | maxdiff"]
    for r in rows:
        tail = (f"shape mismatch: {r['shape_error'].split(': ', 2)[-1]}" if r["shape_error"]
                else f"{r['maxdiff']:.3e}")
        flag = "   <- first row not exact" if r["name"] == mark else ""
        lines.append(f"   {r['name']:15s} | {str(r['exact']):5s} | {str(r['approximate']):11s} | {tail}{flag}")
    return "\n".join(lines)


# -- the checks ---------------------------------------------------------------------------------------


def wrong_steps(batch: dict) -> dict:
    p, Xb, Yb = batch["params"], batch["Xb"], batch["Yb"]
    v = F.forward_np(p, Xb, Yb)
    auto_p, auto_v, auto_loss = F.autodiff_grads(p, Xb, Yb)
    auto = {**auto_v, **auto_p}
    right = F.backward_by_hand(p, v, Xb, Yb)
    out = {"loss": float(v["loss"]), "autodiff_loss": auto_loss, "v": v, "auto": auto, "right": right,
           "right_rows": cmp_table(right, auto)}
    for m in MISTAKES:
        hand = F.backward_by_hand(p, v, Xb, Yb, mistake=m)
        rows = cmp_table(hand, auto)
        out[m] = {"hand": hand, "rows": rows, "first_wrong": first_wrong(rows)}
    alias = out["alias"]["hand"]
    out["alias"]["shares_memory"] = bool(np.shares_memory(alias["logits"], alias["norm_logits"]))
    out["alias"]["rows_changed"] = int(np.sum(np.any(alias["norm_logits"] != right["norm_logits"], axis=1)))
    out["wrong_axis"]["shapes"] = {k: out["wrong_axis"]["hand"][k].shape for k in ("counts_sum_inv", "counts_sum")}
    out["biased_variance"].update(one_step(p, Xb, Yb, right, out["biased_variance"]["hand"]))
    return out


def one_step(p, Xb, Yb, right: dict, wrong: dict) -> dict:
    """One SGD step (lr 0.1) with the right and with the biased-variance gradients: how far apart the
    steps are, and the batch loss after each."""
    g_right = np.concatenate([right[k].ravel() for k in F.PARAMS])
    g_wrong = np.concatenate([wrong[k].ravel() for k in F.PARAMS])
    after = {}
    for name, d in (("right", right), ("wrong", wrong)):
        q = {k: p[k] - LR * d[k] for k in F.PARAMS}
        after[name] = float(F.forward_np(q, Xb, Yb)["loss"])
    per_param = {k: float(np.linalg.norm(wrong[k] - right[k]) / np.linalg.norm(right[k])) for k in F.PARAMS
                 if k != "b1"}  # b1's gradient is ~1e-17 (b1 is redundant before BatchNorm): its ratio is noise
    return {"step_rel_diff": float(np.linalg.norm(g_wrong - g_right) / np.linalg.norm(g_right)),
            "step_cosine": float(g_wrong @ g_right / (np.linalg.norm(g_wrong) * np.linalg.norm(g_right))),
            "per_param_rel_diff": per_param, "loss_after_right": after["right"], "loss_after_wrong": after["wrong"],
            "bndiff2_ratio": float(np.max(np.abs(wrong["bndiff2"] / right["bndiff2"])))}


def rulers(batch: dict, checked: dict) -> dict:
    """Zero and constant gradients of the right backward and of gradir's autodiff."""
    auto, v, Yb = checked["auto"], checked["v"], batch["Yb"]
    n = len(Yb)
    probs_at_target = v["probs"][np.arange(n), Yb]
    dprobs_at_target = auto["probs"][np.arange(n), Yb]
    return {"dlogprobs_sum_autodiff": float(auto["logprobs"].sum()),
            "dlogprobs_sum_hand": float(checked["right"]["logprobs"].sum()),
            "dlogits_row_sum_max": float(np.abs(auto["logits"].sum(1)).max()),
            "dlogits_scale": float(np.abs(auto["logits"]).max()),
            "dlogit_maxes_max": float(np.abs(auto["logit_maxes"]).max()),
            "dnorm_logits_scale": float(np.abs(auto["norm_logits"]).max()),
            "batch_p_min": float(probs_at_target.min()), "batch_p_max": float(probs_at_target.max()),
            "batch_dprobs_ratio": float(dprobs_at_target.min() / dprobs_at_target.max()),
            **confident_vs_poor()}


def confident_vs_poor(p_confident: float = 0.99, p_poor: float = 0.01) -> dict:
    """d/dp of the mean of -log(p) over two examples, through gradir: -1/(2p) each."""
    probs = np.array([p_confident, p_poor])
    dlogp = gr.grad(lambda lp: -gr.mean(lp))(np.log(probs))  # identical: -1/2 each
    dprobs = gr.grad(lambda q: -gr.mean(gr.log(q)))(probs)
    return {"pair_probs": probs, "pair_dlogprobs": np.asarray(dlogp), "pair_dprobs": np.asarray(dprobs),
            "pair_ratio": float(dprobs[1] / dprobs[0])}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(F.DEFAULT_DATA), help="path to names.txt (a fallback is used without it)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    batch = make_batch(args.data)
    checked = wrong_steps(batch)
    figures = {"source": batch["source"], "used_names_txt": batch["source"].startswith("names.txt"),
               "n_params": F.n_params(batch["params"]), "batch": (batch["Xb"], batch["Yb"]), **checked,
               "rulers": rulers(batch, checked)}
    if not args.quiet:
        report(figures)
    return figures


def report(f: dict) -> None:
    print("== J. wrong steps a cmp table catches, and gradients as rulers (makemore MLP of example F) ==")
    print(f"data: {f['source']}")
    print(f"{f['n_params']} parameters, batch of {len(f['batch'][1])}: loss {f['loss']:.6f} (NumPy), "
          f"{f['autodiff_loss']:.6f} (gradir)")
    print("\n0. the right hand backward vs gradir autodiff: every intermediate exact (C: another summation order)")
    print(format_table(f["right_rows"]))

    w = f["wrong_axis"]
    print(f"\n1. wrong axis: counts_sum_inv is {f['v']['counts_sum_inv'].shape}{the_course(COURSE['counts_sum_inv'])}; "
          f"dcounts_sum_inv summed over axis 0 has shape {w['shapes']['counts_sum_inv']};")
    print(f"   broadcasting carries it on (dcounts_sum becomes {w['shapes']['counts_sum']}); cmp reports the shape "
          "mismatch at that row;\n   the table compares every row and marks the first one not exact:")
    print(format_table(w["rows"], w["first_wrong"]))

    a = f["alias"]
    print(f"\n2. alias: dlogits = dnorm_logits (no copy): shares memory {a['shares_memory']}; the in-place "
          f"`dlogits += onehot * dlogit_maxes` changed {a['rows_changed']} of 32 rows of dnorm_logits too. dlogits "
          "itself is right; the table points at norm_logits (exact False, approximate True: the change is as small "
          "as dlogit_maxes, ruler 3):")
    print(format_table(a["rows"], a["first_wrong"]))

    b = f["biased_variance"]
    worst = max([b["step_rel_diff"], *b["per_param_rel_diff"].values()])
    print(f"\n3. biased variance in the backward (1/n for the forward's 1/(n-1)): dbndiff2 is {b['bndiff2_ratio']:.6f} "
          f"(= 31/32 = {31 / 32:.6f}) of the right one, {1 - b['bndiff2_ratio']:.2%} off")
    print(f"   the whole update differs from the right one by {b['step_rel_diff']:.2%} (cosine {b['step_cosine']:.6f}); "
          "per parameter: " + ", ".join(f"{k} {r:.2%}" for k, r in b["per_param_rel_diff"].items())
          + " (b1's gradient is ~1e-17 either way)")
    print(f"   ours: at most {worst:.2%}, {'within' if worst < 0.03 else 'NOT within'} ~3%" + the_course(
        COURSE["step"], "that ~3% is dbndiff2's 1/32, above;\n     mixed with right terms downstream, the step moves less"))
    print(f"   one SGD step (lr {LR}): loss {f['loss']:.6f} -> right step {b['loss_after_right']:.6f}, "
          f"wrong step {b['loss_after_wrong']:.6f} (a one-step check sees the loss fall either way)")
    print("   the per-intermediate table locates it:")
    print(format_table(b["rows"], b["first_wrong"]))

    r = f["rulers"]
    print("\n4. rulers (gradir autodiff of the right forward):")
    print(f"   dlogprobs.sum() = {r['dlogprobs_sum_autodiff']!r} (hand: {r['dlogprobs_sum_hand']!r})"
          f"{the_course(COURSE['dlogprobs_sum'])}: 32 entries of -1/32, a power of two, so exactly -1.0")
    print(f"   rows of dlogits sum to at most {r['dlogits_row_sum_max']:.1e} in size{the_course(COURSE['row_sums'])}; "
          f"entries up to {r['dlogits_scale']:.1e};\n     softmax sums to 1, the one-hot to 1")
    print(f"   gradient reaching the max subtracted for stability: at most {r['dlogit_maxes_max']:.1e}"
          f"{the_course(COURSE['max_grad'])}; dnorm_logits up to {r['dnorm_logits_scale']:.1e};\n     "
          "the loss does not depend on it")
    print(f"   the 1/p step: identical dlogprobs (-1/32) become dprobs = -1/(32 p); in this batch p at the target "
          f"runs from {r['batch_p_min']:.4f} to {r['batch_p_max']:.4f}, so dprobs differ by a factor "
          f"{r['batch_dprobs_ratio']:.1f}")
    print(f"   two examples, p = {r['pair_probs'][0]} and {r['pair_probs'][1]}: dlogprobs {r['pair_dlogprobs'].tolist()}"
          f" -> dprobs {np.round(r['pair_dprobs'], 6).tolist()},")
    print(f"   a factor {r['pair_ratio']:.6f}{the_course(COURSE['factor'])}: the worse the guess, the harder the shove")


if __name__ == "__main__":
    main()
