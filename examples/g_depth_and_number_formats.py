"""G. Depth and number formats: how gradients shrink through deep chains, and what float16 /
bfloat16 can and cannot hold.

Chains.  A chain of depth D starts at the input v_0 = x = 0.5 and applies the same layer D times,

    v_{k+1} = tanh(w * v_k)   (or relu(w * v_k)),      L = v_D,

and dL/dx is taken with `gr.grad` through the whole chain (chain rule: the product of the
per-layer factors w * (1 - v_{k+1}^2)). With w = 1 the factors sit a little below 1 and the gradient
decays slowly; with w = 3 the activations saturate and it vanishes geometrically. A ReLU chain on a
positive input has the factor exactly w: w = 1 keeps 1 at every depth, w = 1.2 gives 1.2^D.

Number formats.  A gradient of value g "computed in float16" is the gradient of
`astype(astype(w16, float32) * g, float16)` with respect to the float16 weight w16: the backward of
the final cast rounds g to float16, exactly where a mixed-precision backward would. Loss scaling
multiplies g by S before that rounding and divides by S afterwards in float32. The dynamic scaler
used here: start at S = 65536; each step, scale every gradient and round to float16; if any is inf,
skip the step and halve S; otherwise keep S (growth, e.g. doubling after 2000 good steps, never
triggers in this demonstration). Weight updates: the pure-float16 weight adds float16(0.0003) each
step and rounds to float16 (below half the gap 2^-10 above 1, so nothing changes); the float32 master
copy adds the update computed in float32 (float32(0.0003)) and rounds to float32. bfloat16 has
float32's exponent range (so tiny values survive) but only 8 bits of mantissa (gap 2^-7 above 1).

The same dynamic scaler then runs inside a compiled training step (gr.amp.mixed_precision): float32
master weights, the loss computed in float16, a skipped step on overflow.

Adam memory.  Parameters, gradients and Adam's two moments, all float32: 4 x 4 = 16 bytes per
parameter, read from the memory report of one traced training step with gr.optim.adam
(gr.train.memory: parameters and optimizer state are the step's inputs, gradients its traced values).
In mixed precision the float16 copy of the weights adds 2: 18 bytes per parameter.

Run:  python examples/g_depth_and_number_formats.py
"""

from __future__ import annotations

import re

import numpy as np

import gradir as gr

X0 = 0.5
TANH_DEPTHS = {1.0: (1, 10, 50, 100), 3.0: (5, 10, 20, 30)}
RELU_DEPTHS = (1, 10, 50)
FP16_VALUES = (1e-4, 1e-6, 1e-7, 1e-8)
SCALE = 65536.0
GPT2_PARAMS = 124_439_808

# The course's figures (TEACHING.md, section G), printed beside ours as "(the course: X)".
COURSE = {
    "tanh": {(1.0, 1): 7.864e-1, (1.0, 10): 2.228e-1, (1.0, 50): 3.396e-2, (1.0, 100): 1.306e-2,
             (3.0, 5): 8.204e-7, (3.0, 10): 2.170e-14, (3.0, 20): 1.518e-29, (3.0, 30): 1.062e-44},
    "relu_w1": 1.0,                # w = 1 stays 1 at every depth
    "relu_base": 1.2,              # w = 1.2 gives 1.2^depth
    "fp16": {1e-4: 1.000e-4, 1e-6: 1.013e-6, 1e-7: 1.192e-7, 1e-8: 0.0},
    "recovered_1e-8": 9.997e-9,    # 1e-8 through loss scale 65536
    "scaled_1.0": float("inf"),    # 1.0 * 65536 in float16
    "dynamic_scale": 16384.0,      # where the dynamic scaler settles for gradients {2.0, 1e-8}
    "pure_fp16_weight": 1.0,       # 1.0 + 0.0003 two thousand times in float16
    "fp32_master_weight": 1.6001,  # the same with a float32 master copy (the course: ~1.6001)
    "bf16_keeps": (1e-8, 1e-10),   # bfloat16 keeps these
    "bf16_gap": 7.8125e-3,         # bfloat16's gap above 1
    "adam_bytes_per_param": 16,
    "adam_gib": 1.854,             # 124,439,808 parameters at 16 bytes
}


def plain(text: str) -> str:
    """Exponents as the course writes them: 1e-08 -> 1e-8, 7.864e-01 -> 7.864e-1."""
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + m.group(1).replace("+", "") + m.group(2), text)


def sci(x: float, digits: int = 3) -> str:
    """A figure as the course writes it: 7.864e-1, 1.062e-44."""
    return plain(f"{x:.{digits}e}")


def chain(act, w: float, depth: int):
    """x -> v_depth with v_{k+1} = act(w * v_k), v_0 = x."""
    def f(x):
        v = x
        for _ in range(depth):
            v = act(w * v)
        return v
    return f


def fp16_gradient(g: float, scale: float = 1.0) -> float:
    """The gradient g * scale as a float16 backward produces it (rounded by the cast's VJP)."""
    loss = lambda w16: gr.astype(gr.astype(w16, gr.float32) * (g * scale), gr.float16)
    out = gr.grad(loss)(np.float16(1.0))
    assert out.dtype == np.float16
    return float(out)


def dynamic_scale(grads, scale: float = SCALE, steps: int = 10) -> tuple[float, list[float]]:
    """Run the halve-on-overflow scaler for `steps` steps; (final scale, scale used at each step)."""
    history = []
    for _ in range(steps):
        history.append(scale)
        if any(np.isinf(fp16_gradient(g, scale)) for g in grads):
            scale /= 2.0
    return scale, history


def accumulate(steps: int = 2000, update: float = 0.0003) -> tuple[float, float]:
    """(pure float16 weight, float32 master weight) after `steps` additions of `update` to 1.0."""
    w16 = gr.astype(np.float32(1.0), gr.float16)
    u16 = gr.astype(np.float32(update), gr.float16)
    master = np.float32(1.0)
    for _ in range(steps):
        w16 = gr.astype(gr.add(w16, u16), gr.float16)
        master = np.float32(master + np.float32(update))
    return float(w16), float(master)


def adam_memory(opt=None):
    """The memory report of one float32 training step of a small MLP with gr.optim.adam, or `opt`
    (gr.train.memory): parameters, gradients and Adam's moments read off the traced step."""
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((16, 32)).astype(np.float32), "b1": np.zeros(32, np.float32),
              "w2": rng.standard_normal((32, 4)).astype(np.float32), "b2": np.zeros(4, np.float32)}
    x, y = rng.standard_normal((8, 16)).astype(np.float32), rng.integers(0, 4, 8)

    def loss(p, x, y):
        return gr.nn.cross_entropy(gr.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"], y)
    return gr.train.memory(loss, params, opt or gr.optim.adam(1e-3), x, y)


def compiled_scaler(steps: int = 6) -> tuple[list[float], list[int], dict, list[dict]]:
    """The dynamic scaler inside a compiled training step (gr.amp.mixed_precision over gr.optim.sgd): weights
    [w0, w1] float32 masters, loss 2.0 * w0 + (1e-4 * w1) * 1e-4 computed in float16, so the gradients are
    {2.0, 1e-8}. Returns the loss scale used at each step, the cumulative skipped steps, the final state and, per
    step, the weights before and after it and the inner optimizer's step count after it."""
    opt = gr.amp.mixed_precision(gr.optim.sgd(0.1), "float16")
    step = gr.train.train_step(lambda p: p[0] * 2.0 + (p[1] * 1e-4) * 1e-4, opt)
    params, state = np.ones(2, np.float32), opt.init(np.ones(2, np.float32))
    scales, skipped, trail = [], [], []
    for _ in range(steps):
        scales.append(float(state["loss_scale"]))
        before = np.array(params, copy=True).tolist()
        _, params, state = step(params, state)
        skipped.append(int(state["skipped"]))
        trail.append({"weights_before": before, "weights_after": np.asarray(params).tolist(),
                      "optimizer_steps": int(state["sgd"]["step"])})
    return scales, skipped, state, trail


def main(verbose: bool = True) -> dict:
    say = print if verbose else (lambda *a, **k: None)
    out: dict = {}

    say("tanh chains v_{k+1} = tanh(w v_k), v_0 = x = 0.5, L = v_D; dL/dx by gr.grad (the product of the")
    say("per-layer factors w * (1 - v_{k+1}^2)):")
    tanh = {}
    for w, depths in TANH_DEPTHS.items():
        for d in depths:
            tanh[(w, d)] = float(gr.grad(chain(gr.tanh, w, d))(X0))
            say(f"  w={w:g} depth {d:3d}: dL/dx = {tanh[(w, d)]:.3e}  (the course: {sci(COURSE['tanh'][(w, d)])})")
    out["tanh"] = tanh
    deepest = max(TANH_DEPTHS[3.0])
    say("  w=1: each factor sits a little below 1 and the gradient decays slowly; w=3: the activations saturate,")
    say(f"  each factor is far below 1 and the gradient vanishes geometrically ({tanh[(3.0, deepest)]:.0e} after "
        f"{deepest} layers).")
    say("relu chains v_{k+1} = relu(w v_k) from x = 0.5: on a positive input each factor is exactly w:")

    relu = {}
    for w in (1.0, 1.2):
        for d in RELU_DEPTHS:
            relu[(w, d)] = float(gr.grad(chain(gr.relu, w, d))(X0))
            course = (f"stays {COURSE['relu_w1']:g}" if w == 1.0 else
                      f"{COURSE['relu_base']:g}^depth = {COURSE['relu_base'] ** d:.6g}")
            say(f"  relu w={w:g} depth {d:3d}: dL/dx = {relu[(w, d)]:.6g}  (w^depth = {w ** d:.6g})  (the course: {course})")
    out["relu"] = relu

    f16 = np.finfo(np.float16)
    say(f"float16 rounding of a gradient (through the float16 cast's VJP). Below {plain(f'{float(f16.tiny):.2g}')} float16 is "
        "subnormal, with a")
    say(f"fixed spacing of {plain(f'{float(f16.smallest_subnormal):.1g}')}: 1e-6 and 1e-7 keep only a digit or two, and 1e-8, "
        "under half the spacing, becomes 0:")
    fp16 = {x: fp16_gradient(x) for x in FP16_VALUES}
    for x, r in fp16.items():
        c = COURSE["fp16"][x]
        say(f"  {x:g} -> {r:.3e}  (the course: {sci(c) if c else '0'})")
    out["fp16"] = fp16

    scaled = fp16_gradient(1e-8, SCALE)
    out["scaled_1e-8"] = scaled
    out["recovered_1e-8"] = float(np.float32(scaled) / np.float32(SCALE))
    out["scaled_1.0"] = fp16_gradient(1.0, SCALE)
    say(f"loss scale {SCALE:g}: 1e-8 -> {scaled:.4e} in fp16, recovered {out['recovered_1e-8']:.3e}  "
        f"(the course: {sci(COURSE['recovered_1e-8'])})")
    say(f"loss scale {SCALE:g}: 1.0 -> {out['scaled_1.0']} (float16 max {float(f16.max):g})  "
        f"(the course: {COURSE['scaled_1.0']})")

    final, history = dynamic_scale((2.0, 1e-8))
    out["dynamic_scale"], out["dynamic_history"] = final, history
    out["dynamic_recovered_1e-8"] = fp16_gradient(1e-8, final) / final
    say(f"dynamic scaler (halve on overflow) for grads {{2.0, 1e-8}}: {' -> '.join(f'{s:g}' for s in dict.fromkeys(history))}"
        f", settles at {final:g}  (the course: {COURSE['dynamic_scale']:g})")
    say(f"  1e-8 recovered at that scale as {out['dynamic_recovered_1e-8']:.3e}")

    scales, skipped, _, trail = compiled_scaler()
    out["compiled_scales"], out["compiled_skipped"], out["compiled_trail"] = scales, skipped, trail
    overflowed = [k for k in range(len(scales)) if skipped[k] > (skipped[k - 1] if k else 0)]
    held = next(sc for k, sc in enumerate(scales) if k not in overflowed)

    def why(sc):
        return "above float16's max itself" if sc > float(f16.max) else f"times the gradient 2.0: {2 * sc:g}"
    say("The same scaler inside one compiled training step (gr.amp.mixed_precision(gr.optim.sgd(0.1), 'float16')):")
    say("the scale each step uses, the weights [w0, w1] before and after it, the inner optimizer's step count and the")
    say("count of skipped steps after it.")
    say(f"{' and '.join(f'{scales[k]:g} ({why(scales[k])})' for k in overflowed)} overflow float16 "
        f"(max {float(f16.max):g}); {held:g} holds:")
    say("  step  loss scale  weights before  weights after  optimizer steps  skipped so far")
    for k, (sc, sk, t) in enumerate(zip(scales, skipped, trail)):
        before, after = (", ".join(f"{v:g}" for v in t[key]) for key in ("weights_before", "weights_after"))
        say(f"  {k:4d}  {sc:10g}  {'[' + before + ']':>14}  {'[' + after + ']':>13}  {t['optimizer_steps']:15d}  {sk:14d}")
    kept = all(trail[k]["weights_after"] == trail[k]["weights_before"]
               and trail[k]["optimizer_steps"] == (trail[k - 1]["optimizer_steps"] if k else 0)
               and scales[k + 1] == scales[k] / 2 for k in overflowed if k + 1 < len(scales))
    out["overflow_changes_nothing_but_the_scale"] = kept
    steps = " and ".join(str(k) for k in overflowed)
    if kept:
        say(f"  steps {steps} overflowed: the weights after equal the weights before, the optimizer's step count "
            f"stays {trail[overflowed[-1]]['optimizer_steps']};")
        say(f"  only the scale halves ({' -> '.join(f'{sc:g}' for sc in dict.fromkeys(scales))}).")
    else:
        say(f"  steps {steps} overflowed, and the table shows more than the scale changing at them.")

    w16, master = accumulate()
    out["pure_fp16_weight"], out["fp32_master_weight"] = w16, master
    exact = 1.0 + 2000 * 0.0003
    say(f"1.0 + 0.0003 x 2000: pure float16 weight {w16:.4f}, float32 master {master:.4f}  "
        f"(the course: {COURSE['pure_fp16_weight']:.1f} and ~{COURSE['fp32_master_weight']:.4f})")
    say(f"  (float16's gap above 1 is 2^-{f16.nmant} = {float(f16.eps):.2g}: 0.0003 is under half of it, so each sum rounds "
        f"back to {w16:.1f};")
    say(f"  float32's gap there is {plain(f'{float(np.finfo(np.float32).eps):.2g}')}, so the master copy keeps every update, to "
        f"its rounding: {master:.4f}, not {exact:g})")

    bf = {x: float(gr.astype(np.float32(x), gr.bfloat16)) for x in (1e-8, 1e-10)}
    one = gr.astype(np.float32(1.0), gr.bfloat16)
    gap = float(np.nextafter(one, gr.astype(np.float32(2.0), gr.bfloat16))) - 1.0
    out["bf16"], out["bf16_gap"] = bf, gap
    say(f"bfloat16: 1e-8 -> {bf[1e-8]:.4e}, 1e-10 -> {bf[1e-10]:.4e}  (the course: keeps "
        f"{' and '.join(plain(f'{x:g}') for x in COURSE['bf16_keeps'])})")
    say(f"  gap above 1 = {gap:.7g}  (the course: {sci(COURSE['bf16_gap'], 4)})")
    say("  (float32's exponent range, so tiny gradients survive without scaling, but 8 bits of mantissa: coarse steps)")

    report = adam_memory()
    per_param = report.bytes_per_parameter
    gib = GPT2_PARAMS * per_param / 2**30
    out["adam_bytes_per_param"], out["adam_gib"] = per_param, gib
    say("Adam training memory, read off one traced float32 training step (gr.train.memory):")
    say("  " + report.text().replace("\n", "\n  "))
    say(f"  -> {per_param:g} bytes/parameter; {GPT2_PARAMS:,} parameters (GPT-2 small) -> {gib:.3f} GiB  "
        f"(the course: {COURSE['adam_bytes_per_param']} bytes, {COURSE['adam_gib']:.3f} GiB)")
    mixed = adam_memory(gr.amp.mixed_precision(gr.optim.adam(1e-3), "float16"))
    out["mixed_bytes_per_param"] = mixed.bytes_per_parameter
    say("The same step in mixed precision (float16 compute, float32 master weights and moments):")
    say("  " + mixed.text().replace("\n", "\n  "))
    say(f"  -> {mixed.bytes_per_parameter:g} bytes/parameter: the float16 copy of the weights the forward computes "
        "with is the extra 2")
    say("     (the gradients of the float32 masters arrive in float32)")
    say("\nPictures: notebooks/g_depth_and_number_formats.py shows a tanh chain's joint forward/backward diagram inline.")
    return out


if __name__ == "__main__":
    main()
