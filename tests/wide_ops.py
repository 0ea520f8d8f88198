"""The ops of the random wide programs (tests/wide_programs.py): each `Builder.op_*` method draws one step
in two spellings, gradir's and torch's, from the values drawn so far."""

from __future__ import annotations

import math

import numpy as np

from tests.wide_ops_numeric import NumericOps
from tests.wide_programs import MAG_LIMIT, MAX_RANK, MAX_SIZE, Program, Step, Var

BIG_SIZE = 8192  # the element limit of a program with a long axis

# name: (gradir spelling, torch spelling, bound on |result| given the bound m on |x|)
UNARY = {
    "tanh": ("gr.tanh({x})", "torch.tanh({x})", lambda m: 1.0),
    "sin": ("gr.sin({x})", "torch.sin({x})", lambda m: 1.0),
    "cos": ("gr.cos({x})", "torch.cos({x})", lambda m: 1.0),
    "sigmoid": ("gr.sigmoid({x})", "torch.sigmoid({x})", lambda m: 1.0),
    "erf": ("gr.erf({x})", "torch.erf({x})", lambda m: 1.0),
    "exp_tanh": ("gr.exp(gr.tanh({x}))", "torch.exp(torch.tanh({x}))", lambda m: math.e),
    "method_exp": ("{x}.tanh().exp()", "{x}.tanh().exp()", lambda m: math.e),
    "square": ("{x} * {x}", "{x} * {x}", lambda m: m * m),
    "gr_square": ("gr.square({x})", "torch.square({x})", lambda m: m * m),
    "neg": ("-{x}", "-{x}", lambda m: m),
    "log1p_square": ("gr.log(1.0 + {x} * {x})", "torch.log(1.0 + {x} * {x})", lambda m: math.log1p(m * m)),
    "hypot1": ("gr.sqrt(1.0 + gr.square({x}))", "torch.sqrt(1.0 + torch.square({x}))", lambda m: math.hypot(1, m)),
    "pow": ("(1.0 + {x} * {x}) ** 0.75", "(1.0 + {x} * {x}) ** 0.75", lambda m: (1 + m * m) ** 0.75),
    "affine": ("{x} * 0.75 + 0.25", "{x} * 0.75 + 0.25", lambda m: 0.75 * m + 0.25),
    "rsub": ("2.0 - {x} / 3.0", "2.0 - {x} / 3.0", lambda m: 2 + m / 3),
    "relu": ("gr.relu({x} - 0.05)", "torch.relu({x} - 0.05)", lambda m: m + 0.05),
    "abs": ("gr.abs({x} + 0.05)", "torch.abs({x} + 0.05)", lambda m: m + 0.05),
    "clip": ("gr.clip({x}, -0.9, 0.8)", "torch.clamp({x}, -0.9, 0.8)", lambda m: 0.9),
    "gelu": ("gr.nn.gelu({x})", "F.gelu({x})", lambda m: m + 1),
    "gelu_tanh": ('gr.nn.gelu({x}, approximate="tanh")', 'F.gelu({x}, approximate="tanh")', lambda m: m + 1),
    "silu": ("gr.nn.silu({x})", "F.silu({x})", lambda m: m + 1),
    "softplus": ("gr.nn.softplus({x})", "F.softplus({x})", lambda m: m + 1),
}

# name: (gradir spelling, torch spelling, bound on |result| given bounds a, b)
BINARY = {
    "add": ("{a} + {b}", "{a} + {b}", lambda a, b: a + b),
    "gr_add": ("gr.add({a}, {b})", "torch.add({a}, {b})", lambda a, b: a + b),
    "sub": ("{a} - {b}", "{a} - {b}", lambda a, b: a + b),
    "mul": ("{a} * {b}", "{a} * {b}", lambda a, b: a * b),
    "div": ("{a} / (1.5 + {b} * {b})", "{a} / (1.5 + {b} * {b})", lambda a, b: a / 1.5),
    "maximum": ("gr.maximum({a}, {b} + 0.0125)", "torch.maximum({a}, {b} + 0.0125)", lambda a, b: max(a, b + 1)),
    "minimum": ("gr.minimum({a}, {b} - 0.0125)", "torch.minimum({a}, {b} - 0.0125)", lambda a, b: max(a, b + 1)),
    "where": ("gr.where({a} > {b} + 0.0125, {a} * 2.0, {b})", "torch.where({a} > {b} + 0.0125, {a} * 2.0, {b})",
              lambda a, b: max(2 * a, b)),
}

# op: how often the generator draws it (relative)
OPS = {
    "unary": 8, "binary": 10, "transpose": 3, "reshape": 3, "broadcast_to": 2, "slice": 5, "squeeze": 3,
    "concatenate": 3, "stack": 2, "pad": 3, "take": 3, "embedding": 1, "advanced_index": 3, "gather": 2,
    "scatter_add": 2, "scatter": 1, "one_hot": 1, "argmax": 3, "reduce": 8, "cumsum": 2, "softmax": 3,
    "layer_norm": 3, "cross_entropy": 1, "matmul": 4, "einsum": 3, "setitem": 4, "to_float32": 2,
    "to_float64": 3, "split": 1, "roll": 1, "tile": 1, "masked_fill": 1, "triangle": 1, "sort": 1, "outer": 1,
    "linear": 2, "loss": 1, "norms": 2, "conv": 2, "attention": 1,
}


def _shape_text(shape) -> str:
    return repr(tuple(shape))


def _slice_text(s: slice) -> str:
    text = ("" if s.start is None else str(s.start)) + ":" + ("" if s.stop is None else str(s.stop))
    return text + ("" if s.step is None else f":{s.step}")


def _index_text(items) -> str:
    parts = []
    for i in items:
        parts.append(_slice_text(i) if isinstance(i, slice) else "..." if i is Ellipsis else str(i))
    return ", ".join(parts) if len(parts) != 1 or items[0] is Ellipsis else parts[0]


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


class Builder(NumericOps):
    """Draws one program: each `op_*` method returns (gradir lines, torch lines, shape, dtype, bound)
    for a new value named `name`, or None when the pool holds nothing it applies to."""

    def __init__(self, seed: int, max_steps: int):
        self.seed, self.max_steps = seed, max_steps
        self.rng = np.random.default_rng(seed)
        self.inputs: list[Var] = []
        self.int_ranges: dict[str, tuple[int, int]] = {}
        self.consts: dict[str, np.ndarray] = {}
        self.pool: list[Var] = []
        self.steps: list[Step] = []
        self.count = 0

    # -- random helpers --
    def coin(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def int(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi] (both included)."""
        return int(self.rng.integers(lo, hi + 1))

    def choice(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def pick(self, ok=lambda v: True, dtype: str | None = None) -> Var | None:
        """A float value of the pool: the newest that fits half the time (chains), else any (fan-out)."""
        cands = [v for v in self.pool if ok(v) and (dtype is None or v.dtype == dtype)]
        if not cands:
            return None
        return cands[-1] if self.coin(0.5) else self.choice(cands)

    def axis(self, v: Var, ok=lambda n: True) -> int | None:
        """An axis of v (negative half the time) whose length passes `ok`."""
        axes = [a for a in range(v.ndim) if ok(v.shape[a])]
        if not axes:
            return None
        a = self.choice(axes)
        return a - v.ndim if self.coin(0.4) else a

    def new_name(self, prefix: str = "v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def index(self, shape, lo: int, hi: int, traced: bool = True) -> tuple[str, np.ndarray]:
        """An int64 index array of `shape` with values in [lo, hi): a constant (`c..`), or a quarter of
        the time (when `traced`) a new int argument (`i..`). Returns its name and a stand-in array."""
        if traced and self.coin(0.25):
            name = self.new_name("i")
            self.inputs.append(Var(name, tuple(shape), "int64"))
            self.int_ranges[name] = (lo, hi)
            return name, np.full(shape, lo, dtype=np.int64)
        name = self.new_name("c")
        self.consts[name] = self.rng.integers(lo, hi, shape).astype(np.int64)
        return name, self.consts[name]

    def const(self, values) -> str:
        name = self.new_name("c")
        self.consts[name] = np.asarray(values, dtype=np.int64)
        return name

    def ramp(self, v: Var) -> str:
        return f"ramp({v.shape})" if v.dtype == "float64" else f'ramp({v.shape}, "{v.dtype}")'

    # -- the program --
    def build(self) -> Program:
        self.draw_inputs()
        ops, weights = zip(*OPS.items())
        p = np.array(weights, dtype=float) / sum(weights)
        for _ in range(self.int(1, self.max_steps)):
            for _attempt in range(30):
                op = ops[int(self.rng.choice(len(ops), p=p))]
                name = self.new_name()
                n_inputs, n_pool, consts = len(self.inputs), len(self.pool), dict(self.consts)
                made = getattr(self, "op_" + op)(name)
                if made is not None:
                    gr_lines, torch_lines, shape, dtype, mag = made
                    shape = tuple(int(n) for n in shape)
                if (made is None or len(shape) > MAX_RANK or math.prod(shape) > self.max_size
                        or not mag <= MAG_LIMIT[dtype]):
                    del self.inputs[n_inputs:], self.pool[n_pool:]  # forget the arguments and constants
                    self.consts = consts  # of a step not taken
                    continue
                if isinstance(gr_lines, str):
                    gr_lines, torch_lines = (f"{name} = {gr_lines}",), (f"{name} = {torch_lines}",)
                out = Var(name, shape, dtype, float(mag))
                self.steps.append(Step(op, tuple(gr_lines), tuple(torch_lines), out))
                self.pool.append(out)
                break
        return Program(self.seed, self.max_steps, self.inputs, self.int_ranges, self.consts, self.steps)

    def draw_inputs(self) -> None:
        n = self.int(1, 3) + (self.coin(0.15))
        empty = self.coin(0.06)  # a few programs hold an empty array
        big = self.coin(0.03)  # and a few a long axis (rows past Triton's 4,096 in registers)
        self.max_size = BIG_SIZE if big else MAX_SIZE
        for k in range(n):
            ndim = int(self.rng.choice(5, p=[0.1, 0.2, 0.3, 0.25, 0.15]))
            shape = [self.choice([1, 1, 2, 2, 3, 3, 4]) for _ in range(ndim)]
            if empty and k == 0 and ndim:
                shape[self.int(0, ndim - 1)] = 0
            if big and k == 0:
                shape = shape[:1] + [self.int(300, min(5000, BIG_SIZE // max(shape[:1] + [1])))]
            self.new_input(shape, "float32" if self.coin(0.08) else "float64")

    def new_input(self, shape, dtype: str = "float64") -> Var:
        """A new float argument (standard normal): an input, or a parameter a step needs (conv weights)."""
        v = Var(self.new_name("x"), tuple(shape), dtype, 4.0)
        self.inputs.append(v)
        self.pool.append(v)
        return v

    # -- elementwise --
    def op_unary(self, name):
        x = self.pick()
        g, t, mag = UNARY[self.choice(sorted(UNARY))]
        return g.format(x=x.name), t.format(x=x.name), x.shape, x.dtype, mag(x.mag)

    def op_binary(self, name):
        a = self.pick()

        def fits(v):
            try:
                np.broadcast_shapes(a.shape, v.shape)
                return True
            except ValueError:
                return False
        cands = [v for v in self.pool if v.dtype == a.dtype and fits(v)]
        other = [v for v in cands if v.shape != a.shape]
        b = self.choice(other if other and self.coin(0.6) else cands)
        g, t, mag = BINARY[self.choice(sorted(BINARY))]
        if self.coin(0.5):
            a, b = b, a
        shape = np.broadcast_shapes(a.shape, b.shape)
        return g.format(a=a.name, b=b.name), t.format(a=a.name, b=b.name), shape, a.dtype, mag(a.mag, b.mag)

    def op_to_float32(self, name):
        x = self.pick(dtype="float64")
        if x is None:
            return None
        g, t = self.choice([("{x}.astype(gr.float32)", "{x}.to(torch.float32)"), ("gr.astype({x}, gr.float32)", "{x}.float()")])
        return g.format(x=x.name), t.format(x=x.name), x.shape, "float32", x.mag

    def op_to_float64(self, name):
        x = self.pick(dtype="float32")
        if x is None:
            return None
        g, t = self.choice([("{x}.astype(gr.float64)", "{x}.to(torch.float64)"), ("gr.astype({x}, gr.float64)", "{x}.double()")])
        return g.format(x=x.name), t.format(x=x.name), x.shape, "float64", x.mag

    # -- views --
    def op_transpose(self, name):
        x = self.pick(lambda v: v.ndim >= 2)
        if x is None:
            return None
        perm = tuple(int(i) for i in self.rng.permutation(x.ndim))
        shape = tuple(x.shape[i] for i in perm)
        form = self.int(0, 3)
        if form == 0:
            return f"gr.transpose({x.name}, {perm})", f"{x.name}.permute({perm})", shape, x.dtype, x.mag
        if form == 1:
            return f"{x.name}.transpose{perm}", f"{x.name}.permute{perm}", shape, x.dtype, x.mag
        if form == 2:
            rev = tuple(reversed(range(x.ndim)))
            g = f"{x.name}.T" if x.ndim == 2 else f"gr.transpose({x.name})"
            return g, f"{x.name}.permute({rev})", x.shape[::-1], x.dtype, x.mag
        i, j = self.axis(x), self.axis(x)
        shape = list(x.shape)
        shape[i], shape[j] = shape[j], shape[i]
        return f"gr.swapaxes({x.name}, {i}, {j})", f"torch.swapaxes({x.name}, {i}, {j})", shape, x.dtype, x.mag

    def op_reshape(self, name):
        x = self.pick()
        if x.size == 0:
            dims = [self.choice([1, 2, 3]) for _ in range(self.int(1, 3))]
            dims[self.int(0, len(dims) - 1)] = 0
        else:
            factors = _prime_factors(x.size)
            ndim = self.int(1 if factors else 0, MAX_RANK)
            dims = [1] * ndim
            for f in factors:
                dims[self.int(0, ndim - 1)] *= f
        spelled = list(dims)
        if x.size and dims and self.coin(0.3):
            spelled[self.int(0, len(dims) - 1)] = -1
        s = tuple(spelled)
        if self.coin(0.5):
            return f"gr.reshape({x.name}, {s})", f"torch.reshape({x.name}, {s})", dims, x.dtype, x.mag
        args = ", ".join(map(str, s)) if s else "()"
        return f"{x.name}.reshape({args})", f"{x.name}.reshape({s})", dims, x.dtype, x.mag

    def op_broadcast_to(self, name):
        x = self.pick()
        grow = lambda n: (0 if self.coin(0.03) else self.choice([2, 3])) if n == 1 and self.coin(0.7) else n  # noqa: E731
        lead = [self.choice([1, 2, 3]) for _ in range(self.int(0, MAX_RANK - x.ndim))]
        shape = tuple(lead + [grow(n) for n in x.shape])
        torch_text = self.choice(["torch.broadcast_to({x}, {s})", "{x}.expand({s})"])
        return f"gr.broadcast_to({x.name}, {shape})", torch_text.format(x=x.name, s=shape), shape, x.dtype, x.mag

    def basic_items(self, shape, negative_steps=True, ints=True, new_axes=True) -> list:
        """A basic index: per axis a full slice, an int, or a slice with any start/stop and a step."""
        items = []
        for n in shape:
            r = self.rng.random()
            if r < 0.3:
                items.append(slice(None))
            elif r < 0.5 and n >= 1 and ints:
                items.append(self.int(-n, n - 1))
            else:
                step = self.choice([None, 1, 2, 3, -1, -2] if negative_steps else [None, 1, 2, 3])
                start = None if self.coin(0.4) else self.int(-n - 1, n + 1)
                stop = None if self.coin(0.4) else self.int(-n - 1, n + 1)
                items.append(slice(start, stop, step))
        if new_axes and self.coin(0.2):
            items.insert(self.int(0, len(items)), None)
        return items

    def trim(self, items: list) -> list:
        """Drop trailing full slices, or spell leading ones as `...`, sometimes."""
        if self.coin(0.3):
            while items and items[-1] == slice(None):
                items.pop()
        elif None not in items and self.coin(0.3) and items and items[0] == slice(None):
            k = next((i for i, s in enumerate(items) if s != slice(None)), len(items))
            items = [Ellipsis] + items[k:]
        return items or [Ellipsis]

    def op_slice(self, name):
        x = self.pick(lambda v: v.ndim >= 1)
        if x is None:
            return None
        items = self.basic_items(x.shape)
        shape = np.empty(x.shape)[tuple(items)].shape
        if math.prod(shape) == 0 and x.size and self.coin(0.8):
            return None
        # torch has no negative steps: flip those axes first, then slice forward
        flips, titems, ax = [], [], 0
        for i in items:
            if isinstance(i, slice) and i.step is not None and i.step < 0:
                n = x.shape[ax]
                r = range(*i.indices(n))
                flips.append(ax)
                titems.append(slice(n - 1 - r[0], n - r[-1], -i.step) if len(r) else slice(0, 0))
            else:
                titems.append(i)
            ax += i is not None
        trimmed = self.trim(list(items))
        if trimmed and trimmed[0] is Ellipsis:
            titems = [Ellipsis] + titems[len(titems) - len(trimmed) + 1:]
        else:
            titems = titems[:len(trimmed)]
        t = f"torch.flip({x.name}, {tuple(flips)})" if flips else x.name
        return f"{x.name}[{_index_text(trimmed)}]", f"{t}[{_index_text(titems)}]", shape, x.dtype, x.mag

    def op_squeeze(self, name):
        x = self.pick()
        ones = [a for a in range(x.ndim) if x.shape[a] == 1]
        if ones and self.coin(0.5):
            if self.coin(0.25):
                shape = [n for n in x.shape if n != 1]
                return f"gr.squeeze({x.name})", f"torch.squeeze({x.name})", shape, x.dtype, x.mag
            axes = sorted(set(self.choice(ones) for _ in range(2)))
            shape = [n for a, n in enumerate(x.shape) if a not in axes]
            ax = axes[0] if len(axes) == 1 else tuple(axes)
            return f"gr.squeeze({x.name}, {ax})", f"torch.squeeze({x.name}, {ax})", shape, x.dtype, x.mag
        a = self.int(-x.ndim - 1, x.ndim)
        shape = list(x.shape)
        shape.insert(a % (x.ndim + 1), 1)
        return f"gr.expand_dims({x.name}, {a})", f"torch.unsqueeze({x.name}, {a})", shape, x.dtype, x.mag

    # -- joins --
    def op_concatenate(self, name):
        x = self.pick(lambda v: v.ndim >= 1)
        if x is None:
            return None
        a = self.axis(x)
        fits = [v for v in self.pool if v.dtype == x.dtype and v.ndim == x.ndim
                and all(m == n for d, (m, n) in enumerate(zip(v.shape, x.shape)) if d != a % x.ndim)]
        parts = [x] + [self.choice(fits) for _ in range(self.int(1, 2))]
        parts = [parts[i] for i in self.rng.permutation(len(parts))]
        shape = list(x.shape)
        shape[a] = sum(v.shape[a] for v in parts)
        names = ", ".join(v.name for v in parts)
        return (f"gr.concatenate([{names}], axis={a})", f"torch.cat([{names}], dim={a})", shape, x.dtype,
                max(v.mag for v in parts))

    def op_stack(self, name):
        x = self.pick(lambda v: v.ndim < MAX_RANK)
        if x is None:
            return None
        same = [v for v in self.pool if v.dtype == x.dtype and v.shape == x.shape]
        parts = [x] + [self.choice(same) for _ in range(self.int(1, 2))]
        a = self.int(-x.ndim - 1, x.ndim)
        shape = list(x.shape)
        shape.insert(a % (x.ndim + 1), len(parts))
        names = ", ".join(v.name for v in parts)
        return (f"gr.stack([{names}], axis={a})", f"torch.stack([{names}], dim={a})", shape, x.dtype,
                max(v.mag for v in parts))

    def op_pad(self, name):
        x = self.pick(lambda v: v.ndim >= 1)
        if x is None:
            return None
        c = self.choice([0.0, 0.5, -1.25])
        form = self.int(0, 4)
        if form == 0:  # one int for every side
            w = [(1, 1)] * x.ndim
            spelled = "1"
        elif form == 1:  # one (before, after) pair for every axis
            w = [(self.int(0, 2), self.int(0, 2))] * x.ndim
            spelled = repr(w[0])
        else:  # per axis, mostly one axis padded
            w = [(0, 0)] * x.ndim
            for a in {self.int(0, x.ndim - 1) for _ in range(self.int(1, 2))}:
                w[a] = (self.int(0, 2), self.int(0, 2))
            spelled = repr(tuple(w))
        flat = tuple(n for pair in reversed(w) for n in pair)
        shape = [n + lo + hi for n, (lo, hi) in zip(x.shape, w)]
        value = "" if c == 0.0 and self.coin(0.5) else f", constant_values={c}"
        return (f"gr.pad({x.name}, {spelled}{value})", f"F.pad({x.name}, {flat}, value={c})", shape, x.dtype,
                max(x.mag, abs(c)))

    # -- gathers and scatters --
    def index_shape(self, room: int):
        return self.choice([(), (self.int(1, 3),), (self.int(1, 3), self.int(1, 2))][:room + 1])

    def op_take(self, name):
        x = self.pick(lambda v: v.ndim >= 1 and max(v.shape) >= 1)
        if x is None:
            return None
        a = self.axis(x, lambda n: n >= 1)
        n = x.shape[a]
        idx, stand_in = self.index(self.index_shape(MAX_RANK - x.ndim + 1), -n, n)
        shape = np.take(np.empty(x.shape), stand_in, axis=a).shape
        t = f"{x.name}[{', '.join([':'] * (a % x.ndim) + [idx])}]"
        g = f"gr.take({x.name}, {idx})" if a == 0 and self.coin(0.3) else f"gr.take({x.name}, {idx}, axis={a})"
        return g, t, shape, x.dtype, x.mag

    def op_embedding(self, name):
        w = self.pick(lambda v: v.ndim == 2 and v.shape[0] >= 1)
        if w is None:
            return None
        shape = self.index_shape(2)
        idx, _ = self.index(shape, 0, w.shape[0])
        return f"gr.nn.embedding({w.name}, {idx})", f"F.embedding({idx}, {w.name})", shape + w.shape[1:], w.dtype, w.mag

    def op_advanced_index(self, name):
        x = self.pick(lambda v: v.ndim >= 1 and max(v.shape) >= 1)
        if x is None:
            return None
        axes = [a for a in range(x.ndim) if x.shape[a] >= 1]
        chosen = sorted({self.choice(axes) for _ in range(self.int(1, 2))})
        k, m = self.int(1, 3), self.int(1, 3)
        if len(chosen) == 2:  # two arrays broadcast together (torch reads a 0-d one as an int: only beside the other)
            shapes = self.choice([[(k,), (k,)], [(k, 1), (m,)]] + [[(), (k,)]] * (chosen[1] == chosen[0] + 1))
        else:
            shapes = [self.choice([(k,), (k, m)])]
        items, dummy = [], []
        for a in range(x.ndim):
            if a in chosen:
                n = x.shape[a]
                idx, stand_in = self.index(shapes[chosen.index(a)], -n, n)
                items.append(idx)
                dummy.append(stand_in)
            else:
                s = self.basic_items([x.shape[a]], negative_steps=False, ints=False, new_axes=False)[0]
                items.append(s)
                dummy.append(s)
        while len(items) > chosen[-1] + 1 and items[-1] == slice(None) and self.coin(0.5):
            items.pop()
            dummy.pop()
        shape = np.empty(x.shape)[tuple(dummy)].shape
        text = f"{x.name}[{_index_text(items)}]"
        return text, text, shape, x.dtype, x.mag

    def op_gather(self, name):
        x = self.pick(lambda v: v.ndim >= 1 and max(v.shape) >= 1)
        if x is None:
            return None
        a = self.axis(x, lambda n: n >= 1)
        shape = tuple(self.int(1, 3) if d == a % x.ndim else self.int(min(1, n), n) for d, n in enumerate(x.shape))
        idx, _ = self.index(shape, 0, x.shape[a])
        return f"gr.gather({x.name}, {a}, {idx})", f"torch.gather({x.name}, {a}, {idx})", shape, x.dtype, x.mag

    def scatter_parts(self):
        """(x, axis, src) of a scatter: src is x itself or a value no larger off the axis."""
        x = self.pick(lambda v: v.ndim >= 1 and v.size >= 1)
        if x is None:
            return None
        a = self.axis(x)
        ok = lambda v: (v.dtype == x.dtype and v.ndim == x.ndim and v.size >= 1  # noqa: E731
                        and all(m <= n for m, n in zip(v.shape, x.shape)))
        src = self.pick(ok) if self.coin(0.6) else x
        return x, a, src

    def op_scatter_add(self, name):
        parts = self.scatter_parts()
        if parts is None:
            return None
        x, a, src = parts
        idx, _ = self.index(src.shape, 0, x.shape[a])
        g = f"gr.scatter_add({x.name}, {a}, {idx}, {src.name})"
        return g, f"torch.scatter_add({x.name}, {a}, {idx}, {src.name})", x.shape, x.dtype, x.mag + src.mag * src.shape[a]

    def op_scatter(self, name):
        parts = self.scatter_parts()
        if parts is None:
            return None
        x, a, src = parts
        n, moved = x.shape[a], np.moveaxis(np.zeros(src.shape, np.int64), a, -1)
        for pos in np.ndindex(moved.shape[:-1]):  # distinct positions along the axis: no write order to guess
            moved[pos] = self.rng.permutation(n)[:moved.shape[-1]]
        idx = self.const(np.moveaxis(moved, -1, a))
        g = f"gr.scatter({x.name}, {a}, {idx}, {src.name})"
        return g, f"torch.scatter({x.name}, {a}, {idx}, {src.name})", x.shape, x.dtype, max(x.mag, src.mag)

    def op_one_hot(self, name):
        x = self.pick(lambda v: v.ndim >= 1 and v.shape[-1] >= 1)
        if x is None:
            return None
        n = x.shape[-1]
        idx, _ = self.index(x.shape[:-1], 0, n)
        dt = "" if x.dtype == "float64" else ", dtype=gr.float32"
        return (f"{x.name} * gr.one_hot({idx}, {n}{dt})", f"{x.name} * F.one_hot({idx}, {n}).to({x.name}.dtype)",
                x.shape, x.dtype, x.mag)

    def op_argmax(self, name):
        x = self.pick(lambda v: v.ndim >= 1 and v.size >= 1)
        if x is None:
            return None
        fn, r = self.choice(["argmax", "argmin"]), self.ramp(x)
        form = self.int(0, 2)
        if form == 0:  # take_along_axis-style gather of the arg-extremum
            u = self.pick(lambda v: v.shape == x.shape, dtype=x.dtype)
            a = self.axis(x)
            shape = list(x.shape)
            shape[a] = 1
            return (f"gr.gather({u.name}, {a}, gr.{fn}({x.name} + {r}, axis={a}, keepdims=True))",
                    f"torch.gather({u.name}, {a}, torch.{fn}({x.name} + {r}, dim={a}, keepdim=True))",
                    shape, x.dtype, u.mag)
        if form == 1:  # a mask of the arg-extremum along the last axis
            u = self.pick(lambda v: v.shape == x.shape, dtype=x.dtype)
            n = x.shape[-1]
            return (f"gr.where(gr.one_hot(gr.{fn}({x.name} + {r}, axis=-1), {n}) > 0.5, {x.name}, {u.name} * 0.5)",
                    f"torch.where(F.one_hot(torch.{fn}({x.name} + {r}, dim=-1), {n}) > 0, {x.name}, {u.name} * 0.5)",
                    x.shape, x.dtype, max(x.mag, u.mag))
        u = self.pick(lambda v: v.size == x.size, dtype=x.dtype)  # over the flattened value: a 0-d index
        return (f"gr.take(gr.reshape({u.name}, (-1,)), gr.{fn}({x.name} + {r}))",
                f"{u.name}.reshape(-1)[torch.{fn}({x.name} + {r})]", (), x.dtype, u.mag)

    # -- in-place writes --
    def value_for(self, x: Var, target) -> tuple[str, float]:
        """What to write into a box of shape `target` of x: a Python float, or a value that broadcasts."""
        fits = lambda v: v.ndim <= len(target) and np.broadcast_shapes(v.shape, target) == tuple(target)  # noqa: E731

        def ok(v):
            try:
                return fits(v)
            except ValueError:
                return False
        v = self.pick(ok, dtype=x.dtype) if self.coin(0.7) else None
        return (v.name, v.mag) if v else (self.choice(["0.5", "-1.25", "2.0"]), 2.0)

    def op_setitem(self, name):
        x = self.pick(lambda v: v.ndim >= 1 and v.size >= 1)
        if x is None:
            return None
        g, t = [f"{name} = {x.name} + 0.0"], [f"{name} = {x.name}.clone()"]
        kind = self.choice(["basic", "basic", "array", "mask", "iadd", "mul_"])
        if kind in ("basic", "array"):
            if kind == "basic":
                items = self.basic_items(x.shape, negative_steps=False, new_axes=False)
                target = np.empty(x.shape)[tuple(items)].shape
            else:
                a = self.axis(x, lambda n: n >= 1) % x.ndim
                n = x.shape[a]
                picks = self.rng.permutation(n)[:self.int(1, n)]
                picks = [int(p) - n if self.coin(0.3) else int(p) for p in picks]
                items = [slice(None)] * a + [self.const(picks)]
                target = x.shape[:a] + (len(picks),) + x.shape[a + 1:]
            value, vmag = self.value_for(x, target)
            op = "+=" if self.coin(0.3) else "="
            line = f"{name}[{_index_text(items)}] {op} {value}"
            g.append(line), t.append(line)
            return g, t, x.shape, x.dtype, x.mag + vmag
        if kind == "mask":
            c = self.choice(["0.5", "-1.25"])
            line = f"{name}[{x.name} > 0.3] = {c}"
            g.append(line), t.append(line)
            return g, t, x.shape, x.dtype, max(x.mag, 1.25)
        value, vmag = self.value_for(x, x.shape)
        line = f"{name} += {value}" if kind == "iadd" else f"{name}.mul_({value})"
        g.append(line), t.append(line)
        return g, t, x.shape, x.dtype, (x.mag + vmag) if kind == "iadd" else x.mag * vmag
