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

import numpy as np

import gradir as gr

X0 = 0.5
TANH_DEPTHS = {1.0: (1, 10, 50, 100), 3.0: (5, 10, 20, 30)}
RELU_DEPTHS = (1, 10, 50)
FP16_VALUES = (1e-4, 1e-6, 1e-7, 1e-8)
SCALE = 65536.0
GPT2_PARAMS = 124_439_808


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


def compiled_scaler(steps: int = 6) -> tuple[list[float], list[int], dict]:
    """The dynamic scaler inside a compiled training step (gr.amp.mixed_precision over gr.optim.sgd): weights
    [w0, w1] float32 masters, loss 2.0 * w0 + (1e-4 * w1) * 1e-4 computed in float16, so the gradients are
    {2.0, 1e-8}. Returns the loss scale used at each step, the cumulative skipped steps and the final state."""
    opt = gr.amp.mixed_precision(gr.optim.sgd(0.1), "float16")
    step = gr.train.train_step(lambda p: p[0] * 2.0 + (p[1] * 1e-4) * 1e-4, opt)
    params, state = np.ones(2, np.float32), opt.init(np.ones(2, np.float32))
    scales, skipped = [], []
    for _ in range(steps):
        scales.append(float(state["loss_scale"]))
        _, params, state = step(params, state)
        skipped.append(int(state["skipped"]))
    return scales, skipped, state


def main(verbose: bool = True) -> dict:
    say = print if verbose else (lambda *a, **k: None)
    out: dict = {}

    say("tanh chains v_{k+1} = tanh(w v_k), v_0 = x = 0.5, L = v_D; dL/dx by gr.grad (the product of the")
    say("per-layer factors w * (1 - v_{k+1}^2)):")
    tanh = {}
    for w, depths in TANH_DEPTHS.items():
        for d in depths:
            tanh[(w, d)] = float(gr.grad(chain(gr.tanh, w, d))(X0))
            say(f"  w={w:g} depth {d:3d}: dL/dx = {tanh[(w, d)]:.3e}")
    out["tanh"] = tanh
    say("  w=1: each factor sits a little below 1 and the gradient decays slowly; w=3: the activations saturate,")
    say("  each factor is far below 1 and the gradient vanishes geometrically (1e-44 after 30 layers).")
    say("relu chains v_{k+1} = relu(w v_k) from x = 0.5: on a positive input each factor is exactly w:")

    relu = {}
    for w in (1.0, 1.2):
        for d in RELU_DEPTHS:
            relu[(w, d)] = float(gr.grad(chain(gr.relu, w, d))(X0))
            say(f"  relu w={w:g} depth {d:3d}: dL/dx = {relu[(w, d)]:.6g}  (w^depth = {w ** d:.6g})")
    out["relu"] = relu

    say("float16 rounding of a gradient (through the float16 cast's VJP). Below 6.1e-5 float16 is subnormal, with a")
    say("fixed spacing of 6e-8: 1e-6 and 1e-7 keep only a digit or two, and 1e-8, under half the spacing, becomes 0:")
    fp16 = {x: fp16_gradient(x) for x in FP16_VALUES}
    for x, r in fp16.items():
        say(f"  {x:g} -> {r:.3e}")
    out["fp16"] = fp16

    scaled = fp16_gradient(1e-8, SCALE)
    out["scaled_1e-8"] = scaled
    out["recovered_1e-8"] = float(np.float32(scaled) / np.float32(SCALE))
    out["scaled_1.0"] = fp16_gradient(1.0, SCALE)
    say(f"loss scale {SCALE:g}: 1e-8 -> {scaled:.4e} in fp16, recovered {out['recovered_1e-8']:.3e}")
    say(f"loss scale {SCALE:g}: 1.0 -> {out['scaled_1.0']} (float16 max 65504)")

    final, history = dynamic_scale((2.0, 1e-8))
    out["dynamic_scale"], out["dynamic_history"] = final, history
    out["dynamic_recovered_1e-8"] = fp16_gradient(1e-8, final) / final
    say(f"dynamic scaler (halve on overflow) for grads {{2.0, 1e-8}}: {' -> '.join(f'{s:g}' for s in dict.fromkeys(history))}"
        f", settles at {final:g}; 1e-8 recovered as {out['dynamic_recovered_1e-8']:.3e}")

    scales, skipped, _ = compiled_scaler()
    out["compiled_scales"], out["compiled_skipped"] = scales, skipped
    say("The same scaler inside one compiled training step (gr.amp.mixed_precision(gr.optim.sgd(0.1), 'float16')),")
    say("the scale each step uses and the count of skipped steps after it: 65536 (above float16's max itself) and")
    say("32768 (times the gradient 2.0) overflow, 16384 holds:")
    say("  step  loss scale  skipped so far")
    for k, (sc, sk) in enumerate(zip(scales, skipped)):
        say(f"  {k:4d}  {sc:10g}  {sk:14d}")
    say("  an overflowing step changes neither the weights nor the optimizer's step count; only the scale halves.")

    w16, master = accumulate()
    out["pure_fp16_weight"], out["fp32_master_weight"] = w16, master
    say(f"1.0 + 0.0003 x 2000: pure float16 weight {w16:.4f}, float32 master {master:.4f}")
    say("  (float16's gap above 1 is 2^-10 = 0.00098: 0.0003 is under half of it, so each sum rounds back to 1.0;")
    say("  float32's gap there is 1.2e-7, so the master copy keeps every update, to its rounding: 1.6001, not 1.6)")

    bf = {x: float(gr.astype(np.float32(x), gr.bfloat16)) for x in (1e-8, 1e-10)}
    one = gr.astype(np.float32(1.0), gr.bfloat16)
    gap = float(np.nextafter(one, gr.astype(np.float32(2.0), gr.bfloat16))) - 1.0
    out["bf16"], out["bf16_gap"] = bf, gap
    say(f"bfloat16: 1e-8 -> {bf[1e-8]:.4e}, 1e-10 -> {bf[1e-10]:.4e}, gap above 1 = {gap:.7g}")
    say("  (float32's exponent range, so tiny gradients survive without scaling, but 8 bits of mantissa: coarse steps)")

    report = adam_memory()
    per_param = report.bytes_per_parameter
    gib = GPT2_PARAMS * per_param / 2**30
    out["adam_bytes_per_param"], out["adam_gib"] = per_param, gib
    say("Adam training memory, read off one traced float32 training step (gr.train.memory):")
    say("  " + report.text().replace("\n", "\n  "))
    say(f"  -> {per_param:g} bytes/parameter; {GPT2_PARAMS:,} parameters (GPT-2 small) -> {gib:.3f} GiB")
    mixed = adam_memory(gr.amp.mixed_precision(gr.optim.adam(1e-3), "float16"))
    out["mixed_bytes_per_param"] = mixed.bytes_per_parameter
    say("The same step in mixed precision (float16 compute, float32 master weights and moments):")
    say("  " + mixed.text().replace("\n", "\n  "))
    say(f"  -> {mixed.bytes_per_parameter:g} bytes/parameter: the float16 copy of the weights the forward computes "
        "with is the extra 2 (the gradients of the float32 masters arrive in float32)")
    say("\nPictures: notebooks/g_depth_and_number_formats.py shows a tanh chain's joint forward/backward diagram inline.")
    return out


if __name__ == "__main__":
    main()
