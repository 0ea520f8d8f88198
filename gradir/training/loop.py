"""A training loop a person would use: `gr.train`, with checkpoints, resuming, evaluation, a progress bar and a plot.

    opt = gr.optim.adam(lr=1e-3)
    result = gr.train(loss, params, opt, lambda k: (xs[k % n], ys[k % n]), steps=1000,
                      eval_fn=lambda p: {"val": val_loss(p)}, eval_every=100,
                      checkpoint="out/run.npz", checkpoint_every=200, plot="out/loss.svg")
    result.params, result.state, result.losses, result.evals

`loss(params, *batch)` returns a scalar. Each step runs ONE program, compiled once by `gr.compile`:
`(params, state, *batch) -> (loss, params, state)`, i.e. `gr.value_and_grad(loss)` then `opt.update` (any
object with gradir.training.optim's `init(params) -> state` and pure `update(grads, state, params) -> (params, state)`).
Step k (0-based) computes the loss of the parameters after k updates on batch k and applies update k+1;
the loss history holds (k, loss) and the evaluation history (k, value) for the parameters after k updates.

Every path and option is checked before the first step: a checkpoint or plot whose folder is missing or not
writable, an optimizer factory passed uncalled (`gr.optim.adam` for `gr.optim.adam(lr=...)`), a bad step count
all fail at once with a GradirError naming what is wrong. Ctrl-C stops after the last finished step, saves the
checkpoint and plot, prints where they are and how to resume, and ends the program with no traceback
(`SystemExit(130)`); `on_interrupt="return"` returns that partial TrainResult instead (`result.interrupted`,
`result.note`), `"raise"` raises the KeyboardInterrupt again. A finished run rerun says "nothing to train" and
what its checkpoint holds (it only reads the checkpoint, which may then lie in a read-only place).

Checkpoints are one `.npz` file (params, optimizer state, step, loss and evaluation histories, and the pytree
structure with every leaf's dtype, so they reload as they were), written atomically: a reader, a crash or a
Ctrl-C never leaves half a file. `resume=True` continues from an existing checkpoint, bit for bit: N steps
straight equal K steps then a resumed run to N (when the batches are a function of the step, or an iterable
that yields the same batches again: the first K are skipped). `load_checkpoint` / `save_checkpoint` /
`plot_losses` / `train_step` are the pieces, for people who write their own loop; they are also reachable
as attributes of the function (`gr.train.load_checkpoint(path)`), since `gr.train` names the function.
"""

from __future__ import annotations

import inspect
import io
import itertools
import json
import os
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from gradir.api import transforms as api
from gradir.core.errors import CheckpointError, GradirError
from gradir.training.optim import loss_and_grads
from gradir.training.step_memory import step_memory
from gradir.util.fileio import write_atomic, write_atomic_with
from gradir.util.outfolder import check_file_writable
from gradir.util.pytree import TreeDef, tree_flatten_with_path, tree_unflatten

FORMAT = "gradir.train checkpoint"
VERSION = 1
PLOT_FORMATS = (".png", ".svg", ".pdf")
ON_INTERRUPT = ("exit", "return", "raise")  # what gr.train does on Ctrl-C, once it has saved the steps done
MAX_POINTS = 2000  # loss points a plot draws; longer histories are drawn per bin of steps
# evaluation names drawn on the plot's second y axis (a score, not a loss): a name containing one of these words
METRIC_WORDS = ("acc", "accuracy", "precision", "recall", "f1", "auc", "score", "iou", "bleu", "top1", "top5")

__all__ = ["Checkpoint", "CheckpointError", "TrainResult", "load_checkpoint", "plot_losses", "save_checkpoint",
           "train", "train_step"]


@dataclass
class TrainResult:
    """What `gr.train` returns: the trained parameters and optimizer state, the step reached, the histories
    (`losses`: [(step, loss)], `evals`: [(step, float or dict)]), and where files went."""

    params: Any
    state: Any
    step: int
    losses: list[tuple[int, float]] = field(default_factory=list)
    evals: list[tuple[int, Any]] = field(default_factory=list)
    checkpoint: Path | None = None
    plot: Path | None = None
    resumed_from: int | None = None  # the checkpoint's step when the run resumed, else None
    seconds: float = 0.0  # wall time of this call
    interrupted: bool = False  # stopped by Ctrl-C: `step` is the last finished step (the checkpoint holds it)
    note: str | None = None  # what the run said besides training: nothing to train, interrupted, optimizer changed
    step_fn: Callable | None = field(default=None, repr=False)  # the compiled training step (its .graph(), .source())

    @property
    def final_loss(self) -> float | None:
        return self.losses[-1][1] if self.losses else None

    def __repr__(self) -> str:
        loss = f", loss {self.losses[0][1]:.6g} -> {self.final_loss:.6g}" if self.losses else ""
        files = "".join(f", {k}={str(v)!r}" for k, v in (("checkpoint", self.checkpoint), ("plot", self.plot)) if v)
        stopped = ", interrupted" if self.interrupted else ""
        return f"TrainResult(step={self.step}{loss}, {len(self.evals)} evals{files}{stopped})"


# -- the step -------------------------------------------------------------------------------------


def train_step(loss: Callable, opt, *, compile: bool = True, backend: str = "llvm") -> Callable:
    """The training step `(params, state, *batch) -> (loss, params, state)`: `gr.value_and_grad(loss)` with
    respect to the parameters (cast and loss-scaled for `gr.amp.mixed_precision`), then `opt.update`. Compiled
    by `gr.compile(backend=...)` into one program (traced once per batch signature) unless `compile=False`
    (then it runs eagerly, op by op)."""
    gradients = loss_and_grads(loss, opt)

    def step(params, state, *batch):
        value, grads = gradients(params, state, *batch)
        params, state = opt.update(grads, state, params)
        return value, params, state

    step.__name__ = f"train_{getattr(loss, '__name__', 'loss')}".replace("<lambda>", "loss")
    return api.compile(step, backend=backend) if compile else step


# -- checkpoints ----------------------------------------------------------------------------------


def _tree_json(td: TreeDef) -> dict:
    """A TreeDef as JSON; dict keys keep their type (str, int, bool), other keys cannot be saved."""
    out: dict = {"kind": td.kind}
    if td.children:
        out["children"] = [_tree_json(c) for c in td.children]
    if td.kind == "dict":
        keys = []
        for k in td.keys:
            if not isinstance(k, (str, int)):  # bool is an int: kept apart by its tag below
                raise CheckpointError(f"cannot save a dict key {k!r} of type {type(k).__name__} in a checkpoint "
                                      "(str and int keys only)", op="train")
            keys.append([type(k).__name__, k])
        out["keys"] = keys
    return out


def _tree_from_json(d: dict) -> TreeDef:
    kids = tuple(_tree_from_json(c) for c in d.get("children", ()))
    keys = tuple({"str": str, "int": int, "bool": bool}[t](k) for t, k in d.get("keys", ()))
    td = TreeDef(d["kind"], kids, keys)
    if td.kind not in ("leaf", "none", "tuple", "list", "dict") or (td.kind == "dict" and len(keys) != len(kids)):
        raise ValueError(f"bad tree node {d!r}")
    return td


def _leaf_kind(x) -> str:
    """How to give a leaf back as it came: an array, a NumPy scalar (compiled 0-d results), or a Python number."""
    if isinstance(x, np.ndarray):
        return "array"
    if isinstance(x, np.generic):
        return "scalar"
    if isinstance(x, (bool, int, float)):
        return type(x).__name__
    raise CheckpointError(f"cannot save a leaf of type {type(x).__name__} in a checkpoint (NumPy arrays and "
                          "numbers only)", op="train")


def _storable(a: np.ndarray) -> np.ndarray:
    """`a` as .npz stores it: dtypes NumPy does not know by itself (bfloat16) as their raw bits."""
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "V" or not a.dtype.isbuiltin else a


def _encode(name: str, tree) -> tuple[dict, dict[str, np.ndarray]]:
    """(meta, arrays) for one pytree: its structure, each leaf's stable key path (``params['W1']``), kind and dtype."""
    leaves, td = tree_flatten_with_path(tree, name)
    meta = {"tree": _tree_json(td), "leaves": []}
    arrays = {}
    for path, x in leaves:
        kind = _leaf_kind(x)
        a = np.asarray(x)
        meta["leaves"].append({"key": path, "kind": kind, "dtype": a.dtype.name, "shape": list(a.shape)})
        arrays[path] = _storable(a)
    return meta, arrays


def _decode(meta: dict, z) -> Any:
    leaves = []
    for leaf in meta["leaves"]:
        a = np.asarray(z[leaf["key"]])
        dt = np.dtype(leaf["dtype"])
        if a.dtype != dt:
            a = a.view(dt)
        if list(a.shape) != list(leaf["shape"]):
            raise ValueError(f"{leaf['key']} has shape {a.shape}, its record says {tuple(leaf['shape'])}")
        kind = leaf["kind"]
        leaves.append(a if kind == "array" else a[()] if kind == "scalar" else {"bool": bool, "int": int,
                                                                                 "float": float}[kind](a[()]))
    return tree_unflatten(_tree_from_json(meta["tree"]), leaves)


@dataclass
class Checkpoint:
    """A loaded checkpoint: the pytrees as they were saved, the step, the histories, and `meta` (the record)."""

    path: Path
    params: Any
    state: Any
    step: int
    losses: list[tuple[int, float]]
    evals: list[tuple[int, Any]]
    meta: dict


def save_checkpoint(path: str | os.PathLike, params, state, step: int, losses=(), evals=(), extra: dict | None = None) -> Path:
    """Write params, optimizer state, step and histories to one `.npz` at `path`, atomically: into a
    temporary file beside it, flushed to disk, then renamed over `path` (on any error or Ctrl-C the
    temporary file is removed and an earlier checkpoint at `path` is untouched)."""
    path = Path(path)
    pmeta, parrays = _encode("params", params)
    smeta, sarrays = _encode("state", state)
    meta = {"format": FORMAT, "version": VERSION, "step": int(step), "params": pmeta, "state": smeta,
            "evals": [[int(k), v] for k, v in evals], **(extra or {})}
    arrays = {**parrays, **sarrays,
              "history/step": np.array([k for k, _ in losses], dtype=np.int64),
              "history/loss": np.array([v for _, v in losses], dtype=np.float64),
              "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)}
    # flushed to disk before the name points at it: a crash keeps the previous checkpoint
    return write_atomic_with(path, lambda f: np.savez(f, **arrays), durable=True)


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Read a checkpoint `save_checkpoint` wrote; CheckpointError naming the file if it is not one (corrupt,
    truncated, another kind of .npz)."""
    path = Path(path)
    try:
        if not zipfile.is_zipfile(path):  # np.load would take any other bytes for a pickle and say so: not the point
            raise zipfile.BadZipFile
        with np.load(path, allow_pickle=False) as z:
            if "meta" not in z.files:
                raise ValueError("it has no 'meta' record")
            meta = json.loads(bytes(z["meta"]).decode())
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                raise ValueError(f"its record is not a {FORMAT!r}")
            if meta.get("version") != VERSION:
                raise ValueError(f"it is version {meta.get('version')!r}; this gradir reads version {VERSION}")
            params, state = _decode(meta["params"], z), _decode(meta["state"], z)
            steps, values = z["history/step"], z["history/loss"]
            losses = [(int(k), float(v)) for k, v in zip(steps, values)]
            evals = [(int(k), v) for k, v in meta["evals"]]
            step = int(meta["step"])
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path} does not exist", op="train") from None
    except Exception as e:  # noqa: BLE001 - whatever a damaged file makes NumPy or zipfile raise, say which file
        why = "not a zip archive (corrupt or truncated)" if isinstance(e, zipfile.BadZipFile) else str(e) or type(e).__name__
        raise CheckpointError(f"cannot read checkpoint {path}: {why}; delete it or pass resume=False to start over",
                              op="train") from None
    return Checkpoint(path, params, state, step, losses, evals, meta)


def _check_fits(ck: Checkpoint, name: str, given, dtypes_too: bool) -> None:
    """The checkpoint's pytree `name` has the structure and leaf shapes (and dtypes) of `given`."""
    saved_leaves, saved_td = tree_flatten_with_path(getattr(ck, name), name)
    given_leaves, given_td = tree_flatten_with_path(given, name)
    hint = "; pass resume=False (or another checkpoint path) to start over"
    if saved_td != given_td:
        saved_keys = [k for k, _ in saved_leaves]
        given_keys = [k for k, _ in given_leaves]
        diff = next((f"it has {s}, here {g}" for s, g in zip(saved_keys, given_keys) if s != g),
                    f"it has {len(saved_keys)} leaves, here {len(given_keys)}")
        what = "optimizer state" if name == "state" else "parameters"
        raise CheckpointError(f"checkpoint {ck.path} does not fit: its {what} have another structure ({diff}){hint}",
                              op="train")
    for (key, s), (_, g) in zip(saved_leaves, given_leaves):
        s, g = np.asarray(s), np.asarray(g)
        if s.shape != g.shape or (dtypes_too and s.dtype != g.dtype):
            raise CheckpointError(f"checkpoint {ck.path} does not fit: it holds {key} as {s.dtype.name}{list(s.shape)}, "
                                  f"here it is {g.dtype.name}{list(g.shape)}{hint}", op="train")


# -- the plot -------------------------------------------------------------------------------------


def _check_plot_path(plot) -> Path:
    p = Path(plot)
    if p.suffix.lower() not in PLOT_FORMATS:
        raise GradirError(f"plot file {p} must end in {', '.join(PLOT_FORMATS)} (the format is taken from it)", op="train")
    return p


def is_metric(name: str) -> bool:
    """Whether the evaluation `name` is a score drawn on its own axis ("accuracy", "val_acc", "f1"), not a loss:
    one of its words (split at _, -, /, . and spaces) is in METRIC_WORDS."""
    words = name.lower().replace("-", " ").replace("_", " ").replace("/", " ").replace(".", " ").split()
    return any(w in METRIC_WORDS for w in words)


def plot_losses(path: str | os.PathLike, losses, evals=(), title: str | None = None,
                metrics: Iterable[str] | None = None) -> Path:
    """Draw the training loss per step and the evaluation points (one series per key of dict values) to
    `path` (.png, .svg or .pdf, by extension), written atomically. Evaluations that are not losses (`metrics`,
    names; default: those `is_metric` picks, such as "accuracy") get a second y axis on the right, so a score
    in [0, 1] is not read on the loss scale."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    path = _check_plot_path(path)
    fmt = path.suffix.lower().lstrip(".")
    with rc_context({"svg.hashsalt": "gradir", "svg.fonttype": "none", "font.size": 9}):
        fig = Figure(figsize=(7, 4), layout="constrained")
        ax = fig.add_subplot()
        if losses:
            steps, values = np.array([k for k, _ in losses]), np.array([v for _, v in losses], dtype=np.float64)
            if len(steps) > MAX_POINTS:  # per-bin mean with its min-max band: a small file, noise and spikes still seen
                bins = np.array_split(np.arange(len(steps)), MAX_POINTS)
                with np.errstate(all="ignore"):
                    lo, hi = (np.array([f(values[b]) for b in bins]) for f in (np.min, np.max))
                    steps, values = np.array([steps[b].mean() for b in bins]), np.array([values[b].mean() for b in bins])
                ax.fill_between(steps, lo, hi, color="tab:blue", alpha=0.2, lw=0)
            ax.plot(steps, values, lw=1, color="tab:blue", label="training loss")
        series: dict[str, list] = {}
        for k, v in evals:
            for name, x in (v.items() if isinstance(v, dict) else [("eval", v)]):
                series.setdefault(str(name), []).append((k, x))
        chosen = set(metrics) if metrics is not None else {name for name in series if is_metric(name)}
        right = ax.twinx() if chosen & set(series) else None
        for i, (name, pts) in enumerate(series.items()):
            xs, ys = zip(*pts)
            (right if name in chosen else ax).plot(xs, ys, "o-" if name not in chosen else "s--", ms=4, lw=1,
                                                   color=f"C{(i + 1) % 10}", label=name)
        if right is not None:
            right.set_ylabel(", ".join(n for n in series if n in chosen))
        drawn = [v for _, v in losses] + [x for n, pts in series.items() if n not in chosen for _, x in pts]
        finite = [v for v in drawn if np.isfinite(v)]
        if finite and min(finite) > 0 and max(finite) / min(finite) > 100:  # decades of progress read best on a log axis
            ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.set_title(title or "training loss", wrap=True)  # wrapped at the figure's edge, not cut
        ax.grid(alpha=0.3)
        if losses or series:  # one legend for both axes
            handles = ax.get_legend_handles_labels()[0] + (right.get_legend_handles_labels()[0] if right else [])
            (right or ax).legend(handles=handles, loc="upper right")  # on the top axes: not under its lines
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, metadata={"Date": None} if fmt in ("svg", "pdf") else None, dpi=110)
    return write_atomic(path, buf.getvalue())


# -- the loop -------------------------------------------------------------------------------------


def _as_args(batch) -> tuple:
    """A tuple batch is the loss's arguments after params; anything else is its one argument."""
    return batch if isinstance(batch, tuple) else (batch,)


def _eval_value(v):
    """An evaluation as plain floats (a dict of them, or one), so histories and checkpoints hold numbers."""
    if isinstance(v, dict):
        return {str(k): float(x) for k, x in v.items()}
    return float(v)


def _eval_text(v) -> str:
    return ", ".join(f"{k} {x:.6g}" for k, x in v.items()) if isinstance(v, dict) else f"{v:.6g}"


class _Progress:
    """The rich progress bar (step, loss, steps/s), or nothing at all when progress=False."""

    def __init__(self, enabled: bool, total: int | None, start: int):
        self.bar = None
        self.start, self.t0 = start, time.perf_counter()
        if not enabled:
            return
        self.bar = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[rate]} steps/s"),
                            TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True))
        self.task = self.bar.add_task("train", total=total, completed=start, loss="-", rate="-")
        self.bar.start()

    def update(self, step: int, loss: float) -> None:
        if self.bar is not None:
            dt = time.perf_counter() - self.t0
            rate = f"{(step - self.start) / dt:,.1f}" if dt > 0 else "-"
            self.bar.update(self.task, completed=step, loss=f"{loss:.6g}", rate=rate)

    def print(self, text: str) -> None:
        if self.bar is not None:
            self.bar.console.print(text, markup=False, highlight=False, soft_wrap=True)  # paths stay whole

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()  # its console still prints the lines below the finished bar


def _check_optimizer(opt) -> None:
    """`opt` has `init` and `update`; a GradirError that says what to do for a factory passed uncalled
    (`gr.optim.adam`), a class, or anything else."""
    if isinstance(opt, type):
        raise GradirError(f"the optimizer {opt.__name__} is a class: pass an instance, {opt.__name__}(...)", op="train")
    if callable(getattr(opt, "init", None)) and callable(getattr(opt, "update", None)):
        return
    if callable(opt):
        module, name = getattr(opt, "__module__", "") or "", getattr(opt, "__name__", None) or repr(opt)
        face = {"gradir.training.optim": "gr.optim", "gradir.training.amp": "gr.amp"}.get(module)
        shown = f"{face}.{name}" if face else name
        try:
            first = next(iter(inspect.signature(opt).parameters), None)
        except (TypeError, ValueError):
            first = None
        call = f"{shown}({first}=...)" if first else f"{shown}()"
        if face:
            raise GradirError(f"{shown} is a factory: call it, {call}", op="train")
        raise GradirError(f"the optimizer {shown} is a function, not an optimizer (an object with init(params) and "
                          f"update(grads, state, params)); if it makes one, call it: {call}", op="train")
    raise GradirError(f"the optimizer must have init(params) and update(grads, state, params) (gr.optim.adam(lr=...) "
                      f"and the like), got {type(opt).__name__}", op="train")


def _check_writable(path, what: str) -> Path:
    """The `what` file (checkpoint, plot) can be written at `path`: its folder exists and takes a file. Checked
    before the first step, so an hour of training never ends in an OSError at the first save."""
    p = Path(path)
    try:
        return check_file_writable(p)
    except OSError as e:
        error = CheckpointError if what == "checkpoint" else GradirError
        raise error(f"cannot write the {what} {p}: {e.strerror or e}", op="train") from None


def _optimizer_change(ck: Checkpoint, opt) -> str | None:
    """"its optimizer was X, this call's is Y" when the checkpoint recorded other optimizer settings (both
    printable: an object printed with its address says nothing)."""
    saved, now = ck.meta.get("optimizer"), repr(opt)
    if not isinstance(saved, str) or saved == now or " at 0x" in saved + now:
        return None
    return f"its optimizer was {saved}, this call's is {now}"


def train(loss: Callable, params, opt, batches: Iterable | Callable[[int], Any], steps: int | None = None, *,
          eval_fn: Callable | None = None, eval_every: int | None = None,
          checkpoint: str | os.PathLike | None = None, checkpoint_every: int | None = None, resume: bool = True,
          plot: str | os.PathLike | None = None, progress: bool = True, compile: bool = True,
          backend: str = "llvm", on_interrupt: str = "exit") -> TrainResult:
    """Train `params` to lower `loss(params, *batch)` with the optimizer `opt` for `steps` steps.

    batches: a function `step -> batch` (resuming is then exact: step k gets the same batch after a resume),
        or an iterable of batches (after a resume its first k batches are skipped; `steps=None` trains until it
        runs out, and a run stops early when it does). A tuple batch is unpacked into the loss's arguments.
    eval_fn: `eval_fn(params) -> float or {name: float}`, run after every `eval_every` steps (default: at the
        last step), shown above the progress bar and recorded in `result.evals` as (step, value).
    checkpoint: a `.npz` path written every `checkpoint_every` steps (default: only at the end), at the end,
        and on Ctrl-C (the last finished step), always atomically; its folder must exist and be writable
        (checked before the first step; a finished checkpoint that trains nothing is only read, so it may
        lie in a read-only place). With `resume=True` an existing checkpoint
        there is loaded and training continues from its step, histories included; `resume=False` starts over
        (and overwrites it). A checkpoint that cannot be read, or whose parameters or optimizer state have
        another structure or shapes, raises CheckpointError naming the file. A checkpoint already at `steps`
        trains nothing: the result's `note` says so, and whether this call's optimizer settings differ from the
        checkpoint's (they apply only to steps still to run; resume=False starts over with them).
    plot: a `.png`/`.svg`/`.pdf` loss curve (training loss and evaluation points; scores such as accuracy on a
        second axis), written at the end, with every checkpoint, and on Ctrl-C.
    progress: a rich progress bar on stderr (step, loss, steps/s); False prints nothing.
    compile / backend: the step `(params, state, *batch) -> (loss, params, state)` is one `gr.compile`d
        program (`train_step`), compiled once; compile=False runs it eagerly.

    on_interrupt: what Ctrl-C does once the run has stopped after its last finished step, saved the checkpoint
        and plot, and printed its note (where they are, how to resume; printed even with progress=False when
        the program ends):
        "exit" (default; PyTorch Lightning's Trainer ends the program too): no traceback, `SystemExit(130)`
            (128 + SIGINT, the shell's code for Ctrl-C), so a script that trains several times stops at once;
        "return": return the partial TrainResult (`interrupted=True`, `note`), for notebooks and sweeps that
            want it (a loop of calls then goes on with the next one);
        "raise": raise the KeyboardInterrupt again, for a caller that handles it.

    Returns a TrainResult: params, state (optimizer), step, losses [(step, loss)], evals, checkpoint, plot, note.
    """
    t_start = time.perf_counter()
    as_function = callable(batches) and not isinstance(batches, Iterable)
    if as_function and steps is None:
        raise GradirError("steps= is needed when batches is a function of the step", op="train")
    for name, v in (("steps", steps), ("eval_every", eval_every), ("checkpoint_every", checkpoint_every)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "steps" else 1)):
            raise GradirError(f"{name} must be a {'non-negative' if name == 'steps' else 'positive'} integer, got {v!r}",
                              op="train")
    if on_interrupt not in ON_INTERRUPT:
        raise GradirError(f"on_interrupt must be one of {', '.join(map(repr, ON_INTERRUPT))}, got {on_interrupt!r}",
                          op="train")
    _check_optimizer(opt)
    # before training, not after an hour of it (the plot is written even when there is nothing to train)
    plot_path = _check_writable(_check_plot_path(plot), "plot") if plot is not None else None
    ck_path = Path(checkpoint) if checkpoint is not None else None
    loading = ck_path is not None and resume and ck_path.is_file()
    if ck_path is not None and not loading:  # to be written; one to load is checked once steps remain to train
        _check_writable(ck_path, "checkpoint")

    state = opt.init(params)
    if ck_path is not None:  # a pytree that cannot be saved fails now, not at the first checkpoint
        _encode("params", params)
        _encode("state", state)
    start, losses, evals, resumed_from, changed = 0, [], [], None, None
    if ck_path is not None and resume and ck_path.exists():
        ck = load_checkpoint(ck_path)
        _check_fits(ck, "params", params, dtypes_too=True)
        _check_fits(ck, "state", state, dtypes_too=False)  # an optimizer may keep its step count in another kind
        if steps is not None and ck.step > steps:
            raise CheckpointError(f"checkpoint {ck_path} is at step {ck.step}, beyond steps={steps}; ask for at least "
                                  f"{ck.step} steps, or pass resume=False to start over", op="train")
        params, state, start, resumed_from = ck.params, ck.state, ck.step, ck.step
        losses, evals = list(ck.losses), list(ck.evals)
        changed = _optimizer_change(ck, opt)
        if steps is not None and ck.step == steps:  # finished: no progress bar stuck at "400/400 loss -"
            return _nothing_to_train(ck, params, state, steps, changed, plot_path, progress, t_start)
        _check_writable(ck_path, "checkpoint")  # steps remain: their checkpoints will be written here

    step_fn = train_step(loss, opt, compile=compile, backend=backend)
    if as_function:
        source = (batches(k) for k in itertools.count(start))
        total = steps
    else:
        source = itertools.islice(iter(batches), start, None)  # the batches steps 0..start-1 already used
        total = steps if steps is not None else (len(batches) if hasattr(batches, "__len__") else None)
    if steps is not None:
        source = itertools.islice(source, steps - start)
    every = eval_every if eval_every is not None else total  # None: the last step (when it is known)

    def save(step_done: int) -> None:
        nonlocal saved_at
        if ck_path is not None and saved_at != step_done:
            save_checkpoint(ck_path, params, state, step_done, losses, evals,
                            extra={"optimizer": repr(opt), "loss": getattr(loss, "__name__", "loss")})
            saved_at = step_done
        if plot_path is not None:
            plot_losses(plot_path, losses, evals)

    saved_at = start if resumed_from is not None else None
    notes = [f"resumed from step {start} of checkpoint {ck_path}; {changed}: the steps from {start} on use this "
             "call's (resume=False starts over with it)"] if changed else []
    bar = _Progress(progress, total, start)
    for note in notes:
        bar.print(note)
    k, first, interrupted = start, len(losses), False
    try:
        for batch in source:
            value, new_params, new_state = step_fn(params, state, *_as_args(batch))
            losses.append((k, float(value)))
            # one statement: Python acts on Ctrl-C at calls and loop jumps, never inside it, so params, state and
            # k always agree; a loss appended for a step not committed yet is dropped below
            params, state, k = new_params, new_state, k + 1
            bar.update(k, losses[-1][1])
            if eval_fn is not None and every and k % every == 0:
                evals.append((k, _eval_value(eval_fn(params))))
                bar.print(f"step {k}: eval {_eval_text(evals[-1][1])}")
            if checkpoint_every is not None and k % checkpoint_every == 0:
                save(k)
        if eval_fn is not None and eval_every is None and every is None and (not evals or evals[-1][0] != k):
            evals.append((k, _eval_value(eval_fn(params))))  # an iterable of unknown length: evaluate at its end
            bar.print(f"step {k}: eval {_eval_text(evals[-1][1])}")
        save(k)
    except KeyboardInterrupt:  # the user stopped the run: keep what it did, say so, then act as on_interrupt asks
        bar.stop()
        interrupted = True
        del losses[first + k - start:]
        if k > start:  # keep the finished steps: rerunning with resume=True continues from here
            save(k)
        kept = (f"checkpoint {ck_path} holds it (resume=True continues from there)" if ck_path is not None and k > start
                else "no checkpoint holds it (pass checkpoint= to continue later)" if k > start
                else "no step had finished")
        notes.append(f"interrupted at step {k}; {kept}")
        if bar.bar is not None:
            bar.print(notes[-1])
        elif on_interrupt == "exit":  # the program ends here: its last word says where the steps done are
            Console(stderr=True).print(notes[-1], markup=False, highlight=False, soft_wrap=True)
        if on_interrupt == "raise":
            raise
        if on_interrupt == "exit":
            raise SystemExit(130) from None  # 128 + SIGINT; SystemExit prints no traceback
    finally:
        bar.stop()
    if k > start and not interrupted:
        files = "".join(f"; {what} {p}" for what, p in (("checkpoint", ck_path), ("plot", plot_path)) if p is not None)
        bar.print(f"trained {k - start} steps (to step {k}): loss {losses[first][1]:.6g} -> {losses[-1][1]:.6g}{files}")
    elif k == start and not interrupted and resumed_from is not None:  # an iterable that ran out where the run stopped
        notes.append(f"nothing to train: the batches run out at step {k}, where checkpoint {ck_path} already is")
        bar.print(notes[-1])
    return TrainResult(params, state, k, losses, evals, ck_path, plot_path, resumed_from,
                       time.perf_counter() - t_start, interrupted, "; ".join(notes) or None, step_fn)


def _nothing_to_train(ck: Checkpoint, params, state, steps: int, changed: str | None, plot: Path | None,
                      progress: bool, t_start: float) -> TrainResult:
    """The result of a run whose checkpoint is at `steps` already: its parameters and histories (and plot), and
    a note saying so (printed unless progress=False), with the optimizer settings when this call's differ."""
    last = f" (loss {ck.losses[-1][1]:.6g} at step {ck.losses[-1][0]})" if ck.losses else ""
    note = (f"nothing to train: checkpoint {ck.path} holds all {steps} steps{last}; ask for more steps to continue, "
            "or pass resume=False to start over")
    if changed:
        note += f"; {changed}, which no step used: resume=False trains afresh with it"
    if plot is not None:
        plot_losses(plot, ck.losses, ck.evals)
    if progress:
        Console(stderr=True).print(note, markup=False, highlight=False, soft_wrap=True)
    return TrainResult(params, state, ck.step, list(ck.losses), list(ck.evals), ck.path, plot, ck.step,
                       time.perf_counter() - t_start, note=note)


# `gr.train` is this function (it hides the module's name on the package): the pieces hang off it
train.train_step = train_step
train.save_checkpoint = save_checkpoint
train.load_checkpoint = load_checkpoint
train.plot_losses = plot_losses
train.CheckpointError = CheckpointError
train.TrainResult = TrainResult
train.memory = step_memory
