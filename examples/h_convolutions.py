"""H. Convolutions: output sizes, a small CNN's parameters and gradients, and what pooling's
backward does.

Output size.  A window of k taps with dilation d spans d(k-1)+1 inputs; sliding it with stride s
over n inputs padded by p on each side gives floor((n + 2p - d(k-1) - 1)/s) + 1 positions per axis.
The formula is checked against the shape `gr.nn.conv2d` actually produces.

The small CNN (batch of two random 3x32x32 images, ten classes):

    conv 3x3 (3 -> 8, pad 1) -> ReLU -> 2x2 max pool -> conv 3x3 (8 -> 16, pad 1) -> ReLU
    -> global average pool -> linear 16 -> 10 -> cross-entropy

Parameters, counted from the arrays: 8*3*3*3 + 8 = 224, 16*8*3*3 + 16 = 1,168, 10*16 + 10 = 170. One
`gr.grad` gives the gradient of the loss with respect to every parameter and the images; the example
compares them with float64 torch autograd (printing the largest difference) and spot-checks a few
coordinates of the first conv weight and of the input by central differences. It prints the layers
with their output shapes and parameters.

Pooling.  Max pool's backward sends a window's whole upstream gradient to the position of its
maximum (zero elsewhere); average pool's spreads it evenly over the k*k positions.

Run:  python examples/h_convolutions.py
"""

from __future__ import annotations

import numpy as np

import gradir as gr

SHAPES = {"conv1_w": (8, 3, 3, 3), "conv1_b": (8,), "conv2_w": (16, 8, 3, 3), "conv2_b": (16,),
          "fc_w": (10, 16), "fc_b": (10,)}
# The course's figures (TEACHING.md, section H), printed beside ours as "(the course: X)".
COURSE = {"size_32_3_1_1_2": 16,                                  # n=32, k=3, p=1, d=1, s=2
          "param_counts": {"conv1": 224, "conv2": 1168, "linear": 170}, "total_params": 1562,
          "upstream": 4.0, "max_pool_to_max": 4.0, "avg_pool_each": 1.0}  # a 2x2 window's pooling backward
PROBES = {"conv1_w": ((0, 0, 0, 0), (3, 1, 2, 1), (7, 2, 1, 2)), "x": ((0, 0, 0, 0), (1, 2, 15, 16), (0, 1, 31, 7))}


def out_size(n: int, k: int, p: int = 0, d: int = 1, s: int = 1) -> int:
    """Positions of a k-tap window (dilation d, stride s) over n inputs padded by p each side."""
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def init(seed: int = 0) -> tuple[dict, np.ndarray, np.ndarray]:
    """Random float64 parameters (He-like scale), two 3x32x32 images and their labels."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in SHAPES.items():
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        params[name] = rng.normal(0.0, np.sqrt(2.0 / fan_in) if len(shape) > 1 else 0.1, shape)
    return params, rng.normal(size=(2, 3, 32, 32)), np.array([3, 7])


def forward(x, p: dict, record: list | None = None):
    """The CNN's logits for images x (N, 3, 32, 32); `record`, if given, receives (layer, output shape, parameters)
    for each stage as it runs."""
    def stage(name, y, *params):
        if record is not None:
            record.append((name, tuple(np.shape(y)), sum(p[k].size for k in params)))
        return y
    h = stage("conv 3x3, 3 -> 8, pad 1", gr.nn.conv2d(x, p["conv1_w"], p["conv1_b"], padding=1), "conv1_w", "conv1_b")
    h = stage("ReLU", gr.relu(h))
    h = stage("max pool 2x2", gr.nn.max_pool2d(h, 2))
    h = stage("conv 3x3, 8 -> 16, pad 1", gr.nn.conv2d(h, p["conv2_w"], p["conv2_b"], padding=1), "conv2_w", "conv2_b")
    h = stage("ReLU", gr.relu(h))
    h = stage("global average pool", gr.mean(h, axis=(2, 3)))
    return stage("linear 16 -> 10 (logits)", gr.nn.linear(h, p["fc_w"], p["fc_b"]), "fc_w", "fc_b")


def cnn_loss(x, conv1_w, conv1_b, conv2_w, conv2_b, fc_w, fc_b, labels):
    """Mean cross-entropy of the small CNN on images x (N, 3, 32, 32)."""
    p = dict(conv1_w=conv1_w, conv1_b=conv1_b, conv2_w=conv2_w, conv2_b=conv2_b, fc_w=fc_w, fc_b=fc_b)
    return gr.nn.cross_entropy(forward(x, p), labels)


def central(arrays: dict, labels, name: str, coord: tuple, h: float = 1e-5) -> float:
    """(L(a + h e) - L(a - h e)) / 2h for one coordinate of arrays[name], the loss evaluated eagerly."""
    def loss_at(t):
        a = arrays[name].copy()
        a[coord] += t
        return float(cnn_loss(*{**arrays, name: a}.values(), labels))
    return (loss_at(h) - loss_at(-h)) / (2 * h)


def pool_backward(pool, window: np.ndarray, upstream: float = 4.0) -> np.ndarray:
    """The input gradient of one 2x2 pooling window given `upstream` on its single output."""
    _, back = gr.vjp(lambda a: pool(a, 2), window[None, None])
    (g,) = back(np.full((1, 1, 1, 1), upstream))
    return np.asarray(g)[0, 0]


def torch_check(x, params, labels):
    """(loss, gradients by name) of the same CNN in PyTorch autograd, float64; None without torch."""
    try:
        import torch
    except ImportError:
        return None
    F = torch.nn.functional
    t = {k: torch.tensor(v, requires_grad=True) for k, v in dict(x=x, **params).items()}
    h = F.max_pool2d(F.relu(F.conv2d(t["x"], t["conv1_w"], t["conv1_b"], padding=1)), 2)
    h = F.relu(F.conv2d(h, t["conv2_w"], t["conv2_b"], padding=1)).mean(dim=(2, 3))
    loss = F.cross_entropy(F.linear(h, t["fc_w"], t["fc_b"]), torch.tensor(labels))
    loss.backward()
    return float(loss.detach()), {k: v.grad.numpy() for k, v in t.items()}


def main(verbose: bool = True) -> dict:
    say = print if verbose else (lambda *a, **k: None)
    out: dict = {}

    cases = [(32, 3, 1, 1, 2), (32, 3, 1, 1, 1), (32, 5, 0, 1, 1), (28, 3, 2, 2, 3), (7, 2, 0, 1, 2)]
    sizes = []
    for n, k, p, d, s in cases:
        y = gr.nn.conv2d(np.zeros((1, 1, n, n)), np.zeros((1, 1, k, k)), padding=p, dilation=d, stride=s)
        sizes.append((n, k, p, d, s, out_size(n, k, p, d, s), y.shape[2], y.shape[3]))
        course = f"  (the course: {COURSE['size_32_3_1_1_2']})" if (n, k, p, d, s) == (32, 3, 1, 1, 2) else ""
        say(f"n={n} k={k} p={p} d={d} s={s}: formula {out_size(n, k, p, d, s)}, conv2d output {y.shape[2]}x{y.shape[3]}"
            + course)
    out["sizes"] = sizes
    out["size_32_3_1_1_2"] = out_size(32, 3, p=1, d=1, s=2)

    params, x, labels = init()
    counts = {"conv1": params["conv1_w"].size + params["conv1_b"].size,
              "conv2": params["conv2_w"].size + params["conv2_b"].size,
              "linear": params["fc_w"].size + params["fc_b"].size}
    out["param_counts"], out["total_params"] = counts, sum(counts.values())
    out["layers"] = []
    forward(x, params, record=out["layers"])
    say("the CNN, layer by layer, on a batch of 2 images (output shape, parameters):")
    for name, shape, n in out["layers"]:
        say(f"  {name:26s} {str(shape):16s} {n:>6,}" if n else f"  {name:26s} {str(shape)}")
    cc = COURSE["param_counts"]
    say(f"parameters: {counts['conv1']:,} + {counts['conv2']:,} + {counts['linear']:,} = {out['total_params']:,}  "
        f"(the course: {cc['conv1']:,} + {cc['conv2']:,} + {cc['linear']:,} = {COURSE['total_params']:,})")

    args = (x, *params.values(), labels)
    loss, grads = gr.value_and_grad(cnn_loss, argnums=tuple(range(7)))(*args)
    out["loss"], out["x"], out["params"], out["labels"] = float(loss), x, params, labels
    out["grads"] = dict(zip(("x", *SHAPES), (np.asarray(g) for g in grads)))
    say(f"loss on a batch of 2 random images: {float(loss):.6f}")
    checked = torch_check(x, params, labels)
    if checked is not None:
        t_loss, t_grads = checked
        out["torch_max_diff"] = max(float(np.abs(out["grads"][k] - t_grads[k]).max()) for k in out["grads"])
        say(f"PyTorch float64 autograd: loss {t_loss:.6f}, largest |gr.grad - torch| over the 7 gradients "
            f"{out['torch_max_diff']:.1e}")

    numeric = {}
    for name, coords in PROBES.items():
        for c in coords:
            numeric[(name, c)] = central(dict(x=x, **params), labels, name, c)
            say(f"d loss / d {name}{list(c)}: gr.grad {out['grads'][name][c]:+.10f}, "
                f"central difference {numeric[(name, c)]:+.10f}")
    out["central"] = numeric

    window = np.array([[1.0, 3.0], [2.0, 0.5]])
    up = COURSE["upstream"]
    out["max_pool_grad"] = pool_backward(gr.nn.max_pool2d, window, up)
    out["avg_pool_grad"] = pool_backward(gr.nn.avg_pool2d, window, up)
    say(f"2x2 window {window.tolist()}, upstream gradient {up:g}:")
    mx, avg = out["max_pool_grad"], out["avg_pool_grad"]
    whole = mx.sum() == mx.max() == up and mx.argmax() == window.argmax()
    to_max = f"all {mx.max():g} to the maximum" if whole else f"{mx.max():g} to the maximum"
    each = f"{avg.flat[0]:g} each" if np.all(avg == avg.flat[0]) else "unevenly"
    say(f"  max pool backward: {mx.tolist()} ({to_max})  (the course: {up:g} -> {COURSE['max_pool_to_max']:g})")
    say(f"  avg pool backward: {avg.tolist()} ({each})  (the course: {up:g} -> {COURSE['avg_pool_each']:g} each)")
    say("\nPictures: notebooks/h_convolutions.py shows the CNN's graph inline.")
    return out


if __name__ == "__main__":
    main()
