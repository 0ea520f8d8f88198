"""J. What the compiler does with a training step: fused kernels, one arena, vectorized loops.

    step = gr.compile(gr.value_and_grad(loss))      # the LLVM backend (gr.compile's default)

The step is the two-layer tanh MLP classifier of examples/models/mlp.py (32 examples, 16 -> 32 -> 4,
mean cross-entropy), forward and backward. The example shows, read off the compiled program:
1. the kernel listing: which IR nodes run together in one loop nest, which values leave a kernel
   (only those get memory), and how a row reduction (log-sum-exp) walks each row in passes;
2. the arena: every stored intermediate has one offset in one buffer allocated once, and the arena
   is exactly as big as the most bytes alive during any one kernel (a call does not allocate it again);
3. which loop kernels LLVM vectorized (lines of each kernel's optimized IR on vector types);
4. that the compiled step computes the NumPy reference's values, and how much faster it runs.

Run:  python examples/j_fused_kernels.py
"""

from __future__ import annotations

import re
import time
import tracemalloc

import numpy as np

import gradir as gr

N, D, H, C = 32, 16, 32, 4


def loss(w1, b1, w2, b2, x, labels):
    h = gr.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    picked = gr.sum(logits * gr.one_hot(labels, C, dtype=logits.dtype), axis=1)
    return gr.mean(gr.logsumexp(logits, axis=1) - picked)


def inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    f = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)
    return f(D, H), f(H), f(H, C), f(C), f(N, D), rng.integers(0, C, N)


def median_seconds(fn, repeats: int = 200) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def kernel_vector_lines(ir_text: str) -> dict:
    """Per kernel function of the optimized IR: (lines using a <N x float> type, its lines, the widths)."""
    out = {}
    for body in re.split(r"(?m)^define ", ir_text)[1:]:
        name = re.search(r"@(\w+)\(", body).group(1)
        lines = body.split("\n}\n")[0].splitlines()[1:]
        vec = [ln for ln in lines if re.search(r"<\d+ x float>", ln)]
        widths = sorted({int(w) for ln in vec for w in re.findall(r"<(\d+) x float>", ln)})
        out[name] = (len(vec), len(lines), widths)
    return out


def call_memory(step, args, compiled, calls: int = 3) -> dict:
    """What a call allocates, by tracemalloc (NumPy reports its buffers to it), and whether the arena moves."""
    address = compiled.arena.ctypes.data
    step(*args)  # warm
    tracemalloc.start()
    peaks, output_bytes = [], 0
    try:
        for _ in range(calls):
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            value, grads = step(*args)
            peaks.append(tracemalloc.get_traced_memory()[1] - before)
            output_bytes = np.asarray(value).nbytes + sum(np.asarray(g).nbytes for g in grads)
            del value, grads
    finally:
        tracemalloc.stop()
    return {"calls": calls, "peak_bytes": max(peaks), "output_bytes": output_bytes,
            "arena_kept": compiled.arena.ctypes.data == address}


def main() -> dict:
    args = inputs()
    step = gr.compile(gr.value_and_grad(loss, argnums=(0, 1, 2, 3)))  # backend="llvm"
    reference = gr.compile(gr.value_and_grad(loss, argnums=(0, 1, 2, 3)), backend="numpy")
    value, grads = step(*args)
    compiled = step.executable(*args)
    program = compiled.program

    print("1. The kernels of the whole step (forward and backward in one program):\n")
    print(program)
    loops = [k for k in program.kernels if k.kind == "loop"]
    rows = [k for k in loops if k.outer]  # an outer loop over rows, the passes inside it
    whole = [k for k in loops if k.outer == 0]  # no outer loop: the whole input is one row
    print(f"\n{len(program.graph.nodes)} IR nodes became {len(program.kernels)} kernels. Loop kernels with a row "
          "reduction (its row value kept between passes):")
    for k in rows:
        print(f"   {k.name}: an outer loop over {k.domain[0]} rows, each walked in {k.num_passes} passes")
    for k in whole:
        print(f"   {k.name}: no outer loop, its whole input is one row, walked in {k.num_passes} pass"
              f"{'es' * (k.num_passes != 1)}")

    print("\n2. The arena: one buffer, allocated once, every stored intermediate at a fixed offset (values that are "
          "never alive during the same kernel share bytes):")
    for v, offset in sorted(program.arena_offsets.items(), key=lambda kv: kv[1])[:6]:
        print(f"   offset {offset:6d}  {v.type_str:12s}  {v.nbytes:6d} bytes")
    print(f"   ... {len(program.arena_offsets)} buffers in {program.arena_bytes} bytes; the most bytes alive during one "
          f"kernel: {program.peak_bytes}.")
    calls = call_memory(step, args, compiled)
    print(f"   Over {calls['calls']} calls the arena stays at one address (unchanged: {calls['arena_kept']}); the most "
          f"memory a call allocates (tracemalloc)\n   is {calls['peak_bytes']:,} bytes, below the arena's "
          f"{program.arena_bytes:,}; of it {calls['output_bytes']:,} bytes are the outputs' data.")

    ir_text = compiled.optimized_ir
    widths = sorted({int(w) for w in re.findall(r"<(\d+) x float>", ir_text)})
    vector_lines = kernel_vector_lines(ir_text)
    print(f"\n3. Vector types in the optimized LLVM IR: {', '.join(f'<{w} x float>' for w in widths) or 'none'}; "
          "per loop kernel, its IR lines that use one:")
    for k in loops:
        ops = sorted({v.op for v in k.nodes} & {"tanh", "exp", "log"})
        n, total, ws = vector_lines.get(k.name, (0, 0, []))
        print(f"   {k.name}{' (' + ', '.join(ops) + ')' if ops else '':12s} {n:4d} of {total:4d} lines"
              + (f" on {', '.join(f'<{w} x float>' for w in ws)}" if ws else ": scalar code"))

    want_value, want_grads = reference(*args)
    diff = max([abs(float(value) - float(want_value))] + [float(np.abs(g - w).max()) for g, w in zip(grads, want_grads)])
    t_llvm = median_seconds(lambda: step(*args))
    t_numpy = median_seconds(lambda: reference(*args))
    print(f"\n4. Same values as the NumPy reference (largest difference {diff:.1e}, float32 rounding); one step takes "
          f"{t_llvm * 1e6:.0f} µs compiled vs {t_numpy * 1e6:.0f} µs as one NumPy call per node ({t_numpy / t_llvm:.1f}x).")
    return {"kernels": len(program.kernels), "row_kernels": len(rows), "arena_bytes": program.arena_bytes,
            "peak_bytes": program.peak_bytes, "vector_widths": widths, "max_diff": diff,
            "kernel_vector_lines": vector_lines,
            "kernel_ops": {k.name: sorted({v.op for v in k.nodes}) for k in loops}, "call_memory": calls,
            "whole_row_kernels": len(whole),
            "value": float(value), "reference_value": float(want_value), "speedup": t_numpy / t_llvm}


if __name__ == "__main__":
    main()
