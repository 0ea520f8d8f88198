"""The numeric ops of the random wide programs (reductions, normalizations, products, losses, convolutions,
and the rest of what users write): a mixin of tests/wide_ops.py's `Builder`, whose helpers (`pick`,
`axis`, `index`, `ramp`, `new_input`, ...) they use. Each `op_*` returns (gradir spelling, torch spelling,
shape, dtype, bound on |value|) or None when the values drawn so far offer nothing it applies to."""

from __future__ import annotations

import math

import numpy as np

from tests.wide_programs import MAX_RANK

REDUCE_TORCH = {"sum": "torch.sum", "mean": "torch.mean", "max": "torch.amax", "min": "torch.amin",
                "logsumexp": "torch.logsumexp", "var": "torch.var"}


class NumericOps:
    """Steps over the pool of a `Builder` (see tests/wide_ops.py)."""

    # -- reductions and normalizations --
    def op_reduce(self, name):
        x = self.pick()
        fn = self.choice(["sum", "sum", "mean", "max", "min", "logsumexp", "var"])
        r = self.rng.random()
        if x.ndim == 0 or r < 0.2:
            axis, axes = None, list(range(x.ndim))
        elif r < 0.7 or x.ndim == 1:
            axis = self.axis(x)
            axes = [axis % x.ndim]
        else:
            axes = sorted({self.int(0, x.ndim - 1) for _ in range(self.int(2, 3))})
            axis = tuple(a - x.ndim if self.coin(0.3) else a for a in axes)
            axis = axis[0] if len(axis) == 1 else axis
        count = math.prod(x.shape[a] for a in axes)
        if fn != "sum" and count == 0:
            return None
        keep = self.coin(0.4)
        shape = np.sum(np.empty(x.shape), axis=axis, keepdims=keep).shape
        operand = f"{x.name} + {self.ramp(x)}" if fn in ("max", "min") else x.name
        kw = ("" if axis is None else f", axis={axis}") + (", keepdims=True" if keep else "")
        if fn in ("sum", "mean", "max", "min") and self.coin(0.3):
            g = f"({operand}).{fn}({kw[2:]})" if operand != x.name else f"{x.name}.{fn}({kw[2:]})"
        else:
            g = f"gr.{fn}({operand}{kw})"
        dims = axis if axis is not None else tuple(range(x.ndim))
        tkw = f", dim={dims}" + (", keepdim=True" if keep else "")
        tkw += ", correction=0" if fn == "var" else ""
        t = f"{REDUCE_TORCH[fn]}({operand}{tkw})"
        mag = {"sum": x.mag * count, "mean": x.mag, "max": x.mag + 2, "min": x.mag + 2,
               "logsumexp": x.mag + math.log(max(count, 1)), "var": x.mag * x.mag}[fn]
        return g, t, shape, x.dtype, mag

    def op_cumsum(self, name):
        x = self.pick()
        if x.ndim == 0 or self.coin(0.15):
            return f"gr.cumsum({x.name})", f"torch.cumsum({x.name}.reshape(-1), 0)", (x.size,), x.dtype, x.mag * x.size
        a = self.axis(x)
        return (f"gr.cumsum({x.name}, axis={a})", f"torch.cumsum({x.name}, dim={a})", x.shape, x.dtype,
                x.mag * x.shape[a])

    def op_softmax(self, name):
        x = self.pick(lambda v: v.ndim >= 1)
        if x is None:
            return None
        a = self.axis(x, lambda n: n >= 1)
        if a is None:
            return None
        fn = self.choice(["softmax", "log_softmax"])
        kw = "" if a == -1 and self.coin(0.5) else f", axis={a}"
        mag = 1.0 if fn == "softmax" else 2 * x.mag + math.log(x.shape[a]) + 1
        return f"gr.nn.{fn}({x.name}{kw})", f"torch.{fn}({x.name}, dim={a})", x.shape, x.dtype, mag

    def op_layer_norm(self, name):
        x = self.pick(lambda v: v.ndim >= 1)
        if x is None:
            return None
        axes = sorted({self.int(0, x.ndim - 1) for _ in range(self.int(1, 2))})
        norm_shape = tuple(x.shape[a] for a in axes)
        # over one value the gradient is exactly 0 but torch's float32 kernel rounds terms rsqrt(eps) ~ 316 times
        # its scale (program 3751 of the long mode): no float32 layer_norm over a single value
        if math.prod(norm_shape) == 0 or (math.prod(norm_shape) == 1 and x.dtype == "float32"):
            return None
        spelled = [a - x.ndim if self.coin(0.4) else a for a in axes]
        axis = spelled[0] if len(axes) == 1 else tuple(spelled)
        w = self.pick(lambda v: v.shape == norm_shape, dtype=x.dtype) if self.coin(0.5) else None
        b = self.pick(lambda v: v.shape == norm_shape, dtype=x.dtype) if self.coin(0.5) else None
        args = "".join(f", {v.name if v else None}" for v in (w, b)) if (w or b) else ""
        kw = "" if axis == -1 and self.coin(0.5) else f", axis={axis}"
        t_args = "".join(f", {v.name if v else None}" for v in (w, b))
        mag = math.sqrt(math.prod(norm_shape)) * (w.mag if w else 1) + (b.mag if b else 0)
        return (f"gr.nn.layer_norm({x.name}{args}{kw})", f"layer_norm_axes({x.name}, {axes}{t_args})",
                x.shape, x.dtype, mag)

    def op_cross_entropy(self, name):
        x = self.pick(lambda v: v.ndim == 2 and v.size >= 1)
        if x is None:
            return None
        idx, _ = self.index((x.shape[0],), 0, x.shape[1])
        reduction = self.choice(["mean", "sum", "none"])
        kw = "" if reduction == "mean" else f', reduction="{reduction}"'
        shape = (x.shape[0],) if reduction == "none" else ()
        mag = (2 * x.mag + math.log(x.shape[1]) + 1) * (x.shape[0] if reduction == "sum" else 1)
        return f"gr.nn.cross_entropy({x.name}, {idx}{kw})", f"F.cross_entropy({x.name}, {idx}{kw})", shape, x.dtype, mag

    # -- products --
    def op_matmul(self, name):
        a = self.pick(lambda v: v.ndim >= 1)
        if a is None:
            return None

        def shape_with(b):
            try:
                return np.matmul(np.zeros(a.shape), np.zeros(b.shape)).shape
            except ValueError:
                return None
        partners = [b for b in self.pool if b.dtype == a.dtype and b.ndim >= 1 and shape_with(b) is not None]
        if partners and self.coin(0.7):
            b = self.choice(partners)
            bt, bn, bmag = b.name, b.name, b.mag
            shape = shape_with(b)
        elif a.ndim >= 2:  # a @ a^T: always fits
            bt, bn, bmag = f"{a.name}.transpose(-1, -2)", f"gr.swapaxes({a.name}, -1, -2)", a.mag
            shape = a.shape[:-1] + a.shape[-2:-1]
        else:
            bt = bn = a.name
            bmag, shape = a.mag, ()
        g, t = (f"{a.name} @ {bn}", f"{a.name} @ {bt}") if self.coin(0.5) else \
            (f"gr.matmul({a.name}, {bn})", f"torch.matmul({a.name}, {bt})")
        return g, t, shape, a.dtype, a.mag * bmag * max(a.shape[-1], 1)

    def op_einsum(self, name):
        a = self.pick()
        letters = iter("ijklmnopqrstuvwxyz")
        size: dict[str, int] = {}
        specs = []
        operands = [a] + ([self.pick(dtype=a.dtype)] if self.coin(0.7) else [])
        for v in operands:
            spec = []
            for n in v.shape:
                shared = [c for c, s in size.items() if s == n and c not in spec]
                if shared and specs and self.coin(0.6):
                    spec.append(self.choice(shared))
                else:
                    c = next(letters)
                    size[c] = n
                    spec.append(c)
            specs.append("".join(spec))
        seen = list(dict.fromkeys("".join(specs)))
        out = [seen[i] for i in self.rng.permutation(len(seen)) if self.coin(0.6)]
        subscripts = ",".join(specs) + "->" + "".join(out)
        names = ", ".join(v.name for v in operands)
        summed = math.prod(size[c] for c in seen if c not in out)
        mag = math.prod(v.mag for v in operands) * max(summed, 1)
        return (f'gr.einsum("{subscripts}", {names})', f'torch.einsum("{subscripts}", {names})',
                tuple(size[c] for c in out), a.dtype, mag)

    # -- more of what users write --
    def op_split(self, name):
        x = self.pick(lambda v: v.ndim >= 1 and max(v.shape) >= 2)
        if x is None:
            return None
        a = self.axis(x, lambda n: n >= 2)
        n = x.shape[a]
        if self.coin(0.5):
            sections = self.choice([d for d in range(1, n + 1) if n % d == 0])
            how = str(sections)
        else:
            sections = sorted({self.int(0, n) for _ in range(self.int(1, 2))})
            how = repr(sections)
        parts = np.split(np.zeros(x.shape), sections, axis=a)
        j = self.int(-len(parts), len(parts) - 1)
        return (f"gr.split({x.name}, {how}, axis={a})[{j}]", f"torch.tensor_split({x.name}, {how}, dim={a})[{j}]",
                parts[j].shape, x.dtype, x.mag)

    def op_roll(self, name):
        x = self.pick(lambda v: v.ndim >= 1)
        if x is None:
            return None
        shift = self.int(-3, 3)
        if self.coin(0.2):
            return f"gr.roll({x.name}, {shift})", f"torch.roll({x.name}, {shift})", x.shape, x.dtype, x.mag
        a = self.axis(x)
        return (f"gr.roll({x.name}, {shift}, axis={a})", f"torch.roll({x.name}, {shift}, dims={a})", x.shape,
                x.dtype, x.mag)

    def op_tile(self, name):
        x = self.pick()
        if self.coin(0.5):
            reps = tuple(self.int(1, 2) for _ in range(self.int(1, MAX_RANK)))
            shape = np.tile(np.zeros(x.shape), reps).shape
            return f"gr.tile({x.name}, {reps})", f"torch.tile({x.name}, {reps})", shape, x.dtype, x.mag
        if x.ndim == 0 or self.coin(0.2):
            r = self.int(1, 3)
            return (f"gr.repeat({x.name}, {r})", f"torch.repeat_interleave({x.name}.reshape(-1), {r})", (x.size * r,),
                    x.dtype, x.mag)
        a = self.axis(x)
        if self.coin(0.5):
            r = self.int(1, 3)
            t = f"torch.repeat_interleave({x.name}, {r}, dim={a})"
        else:
            r = [self.int(0, 2) for _ in range(x.shape[a])]
            t = f"torch.repeat_interleave({x.name}, torch.tensor({r}, dtype=torch.long), dim={a})"  # ([] is float)
        shape = np.repeat(np.zeros(x.shape), r, axis=a).shape
        return f"gr.repeat({x.name}, {r}, axis={a})", t, shape, x.dtype, x.mag

    def op_masked_fill(self, name):
        x = self.pick()

        def fits(v):
            try:
                return np.broadcast_shapes(v.shape, x.shape) == x.shape
            except ValueError:
                return False
        m = self.pick(fits)
        c = self.choice(["0.5", "-1.25"])
        return (f"gr.masked_fill({x.name}, {m.name} > 0.2, {c})", f"{x.name}.masked_fill({m.name} > 0.2, {c})",
                x.shape, x.dtype, max(x.mag, 1.25))

    def op_triangle(self, name):
        x = self.pick(lambda v: v.ndim >= 2)
        if x is None:
            return None
        fn, k = self.choice(["tril", "triu"]), self.int(-2, 2)
        kw = "" if k == 0 and self.coin(0.5) else f", {k}"
        return f"gr.{fn}({x.name}{kw})", f"torch.{fn}({x.name}{kw})", x.shape, x.dtype, x.mag

    def op_sort(self, name):
        x = self.pick(lambda v: v.ndim >= 1)
        if x is None:
            return None
        a, r = self.axis(x), self.ramp(x)
        if self.coin(0.5) or x.shape[a] == 0:
            desc = self.coin(0.3)
            kw = ", descending=True" if desc else ""
            return (f"gr.sort({x.name} + {r}, axis={a}{kw})", f"torch.sort({x.name} + {r}, dim={a}{kw}).values",
                    x.shape, x.dtype, x.mag + 2)
        k, largest = self.int(1, x.shape[a]), self.coin(0.7)
        shape = list(x.shape)
        shape[a] = k
        kw = "" if largest else ", largest=False"
        return (f"gr.topk({x.name} + {r}, {k}, axis={a}{kw})[0]", f"torch.topk({x.name} + {r}, {k}, dim={a}{kw}).values",
                shape, x.dtype, x.mag + 2)

    def op_outer(self, name):
        a, b = self.pick(), self.pick()
        b = b if b.dtype == a.dtype else a
        return (f"gr.outer({a.name}, {b.name})", f"torch.outer({a.name}.reshape(-1), {b.name}.reshape(-1))",
                (a.size, b.size), a.dtype, a.mag * b.mag)

    def op_linear(self, name):
        x = self.pick(lambda v: v.ndim >= 1)
        if x is None:
            return None
        w = self.pick(lambda v: v.ndim == 2 and v.shape[1] == x.shape[-1], dtype=x.dtype)
        w = w or self.new_input((self.int(1, 4), x.shape[-1]), x.dtype)
        b = self.pick(lambda v: v.shape == w.shape[:1], dtype=x.dtype) if self.coin(0.6) else None
        args = f"{x.name}, {w.name}" + (f", {b.name}" if b else "")
        shape = x.shape[:-1] + w.shape[:1]
        return f"gr.nn.linear({args})", f"F.linear({args})", shape, x.dtype, x.mag * w.mag * max(x.shape[-1], 1) + (
            b.mag if b else 0)

    def op_loss(self, name):
        x = self.pick(lambda v: v.size >= 1)
        if x is None:
            return None
        y = self.pick(lambda v: v.shape == x.shape, dtype=x.dtype)
        fn = self.choice(["mse_loss", "binary_cross_entropy_with_logits"])
        reduction = self.choice(["mean", "sum", "none"])
        kw = "" if reduction == "mean" else f', reduction="{reduction}"'
        target = y.name if fn == "mse_loss" else f"gr.sigmoid({y.name})"
        shape = x.shape if reduction == "none" else ()
        mag = (x.mag + y.mag) ** 2 if fn == "mse_loss" else 2 * x.mag + 1
        return (f"gr.nn.{fn}({x.name}, {target}{kw})",
                f"F.{fn}({x.name}, {target.replace('gr.', 'torch.')}{kw})", shape, x.dtype,
                mag * (x.size if reduction == "sum" else 1))

    def op_norms(self, name):
        x = self.pick(lambda v: v.ndim >= 2 and v.size >= 1)
        if x is None:
            return None
        if self.coin(0.5):  # rms_norm over trailing axes
            k = self.int(1, min(2, x.ndim))
            norm = x.shape[-k:]
            w = self.pick(lambda v: v.shape == norm, dtype=x.dtype) if self.coin(0.5) else None
            args = f"{x.name}, {norm}" + (f", {w.name}" if w else "")
            return (f"gr.nn.rms_norm({args}, eps=1e-5)", f"F.rms_norm({args}, eps=1e-5)", x.shape, x.dtype,
                    math.sqrt(math.prod(norm)) * (w.mag if w else 1))
        if x.ndim not in (2, 4) or x.size // x.shape[1] < 2:  # batch_norm: (N, C) or (N, C, H, W), 2+ per channel
            return None
        c = x.shape[1]
        w = self.pick(lambda v: v.shape == (c,), dtype=x.dtype) if self.coin(0.5) else None
        b = self.pick(lambda v: v.shape == (c,), dtype=x.dtype) if self.coin(0.5) else None
        wb = f"{w.name if w else None}, {b.name if b else None}"
        # .contiguous(): torch 2.13's CPU batch_norm backward is wrong for a channels-last-strided input with a
        # size-1 axis (a permuted (2, 3, 2, 1); finite differences agree with the contiguous input's gradient)
        return (f"gr.nn.batch_norm({x.name}, {wb})",
                f"F.batch_norm({x.name}.contiguous(), None, None, {wb}, training=True)",
                x.shape, x.dtype, math.sqrt(x.size) * (w.mag if w else 1) + (b.mag if b else 0))

    def op_conv(self, name):
        x = self.pick(lambda v: v.ndim in (3, 4) and v.size >= 1)
        if x is None:
            return None
        spatial = x.shape[2:] if x.ndim == 4 else x.shape[2:]
        if x.ndim == 3:  # conv1d over (N, C, L)
            k, s, p, d = self.int(1, 3), self.int(1, 2), self.int(0, 1), self.int(1, 2)
            out = (spatial[0] + 2 * p - d * (k - 1) - 1) // s + 1
            if out < 1:
                return None
            w = self.new_input((self.int(1, 3), x.shape[1], k), x.dtype)
            kw = f"stride={s}, padding={p}, dilation={d}"
            g = f"gr.nn.conv1d({x.name}, {w.name}, {kw})"
            return g, g.replace("gr.nn.", "F."), (x.shape[0], w.shape[0], out), x.dtype, x.mag * w.mag * k * x.shape[1]
        op = self.choice(["conv2d", "max_pool2d", "avg_pool2d"])
        k, s, p = self.int(1, 2), self.int(1, 2), self.int(0, 1)
        if p * 2 > k:  # torch: padding at most half the kernel
            p = 0
        out = [(n + 2 * p - k) // s + 1 for n in spatial]
        if min(out) < 1:
            return None
        kw = f"stride={s}, padding={p}"
        if op == "conv2d":
            w = self.new_input((self.int(1, 3), x.shape[1], k, k), x.dtype)
            b = self.pick(lambda v: v.shape == w.shape[:1], dtype=x.dtype) if self.coin(0.5) else None
            args = f"{x.name}, {w.name}" + (f", {b.name}" if b else "")
            g = f"gr.nn.conv2d({args}, {kw})"
            return (g, g.replace("gr.nn.", "F."), (x.shape[0], w.shape[0], *out), x.dtype,
                    x.mag * w.mag * k * k * x.shape[1] + (b.mag if b else 0))
        operand = f"{x.name} + {self.ramp(x)}" if op == "max_pool2d" else x.name
        g = f"gr.nn.{op}({operand}, {k}, {kw})"
        return g, g.replace("gr.nn.", "F."), (*x.shape[:2], *out), x.dtype, x.mag + 2

    def op_attention(self, name):
        x = self.pick(lambda v: v.ndim >= 2 and v.size >= 1)  # torch's does not broadcast empty batches
        if x is None:
            return None
        kv = self.pick(lambda v: v.ndim >= 2 and v.size >= 1 and v.shape[-1] == x.shape[-1], dtype=x.dtype)
        try:
            shape = np.broadcast_shapes(x.shape[:-2], kv.shape[:-2]) + x.shape[-2:]
        except ValueError:
            return None
        causal = ", is_causal=True" if kv.shape[-2] == x.shape[-2] and self.coin(0.5) else ""
        args = f"{x.name}, {kv.name}, {kv.name}{causal}"
        return (f"gr.nn.scaled_dot_product_attention({args})", f"F.scaled_dot_product_attention({args})", shape,
                x.dtype, kv.mag)
