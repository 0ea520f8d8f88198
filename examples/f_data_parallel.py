"""F. Data-parallel training with gr.distributed: two processes, one answer.

Two processes each hold part of every global batch, compute the mean loss and gradient of their part with one
compiled program, and combine the gradients with an all-reduce (torch.distributed, gloo, on this machine's
loopback interface). The invariant that makes this right is the one section F teaches: a rank's mean gradient
must be weighted by its share of the examples, n_r / N. Here the ranks hold 20 and 12 of each batch of 32, and
in the last step 20 and 0 (the tail of an epoch); a plain average of the two means would be wrong whenever the
counts differ. With the weighting, every step's loss and parameters equal a single-process run on the whole
batch, to rounding (float64).

1. The makemore MLP (the model and data of f_makemore_training.py, imported from it): block 3, n_embd 10,
   n_hidden 200, cross-entropy; SGD. BatchNorm is left out: its batch statistics couple the examples of a
   batch, so the loss is not a mean of per-example losses and the two halves of a batch would normalise
   differently (PyTorch's DDP needs SyncBatchNorm for that); this is makemore's MLP before BatchNorm.
   The data is ../shared/data/names.txt; without it, seeded random tokens (the example says which it used).
2. A GPT-style model: the two-block decoder of i_small_decoder.py (causal attention, LayerNorm, GELU MLP, tied
   embedding), next-token cross-entropy on seeded random token sequences, Adam; batches of 8 split 5 / 3.

Printed: the per-rank example counts and weights, the bucket plan (which gradients travel together, in which
order), then for each model the single-process loss and the data-parallel loss per step and their largest
difference, and whether the ranks' parameters are identical bit for bit.

Run:  python examples/f_data_parallel.py [--steps 200] [--gpt-steps 30] [--data ../shared/data/names.txt]
      (starts its own 2 processes)
or:   torchrun --nproc-per-node 2 examples/f_data_parallel.py [--steps 200]
Several machines: see `gr.distributed`'s docstring (torchrun --nnodes 2 --rdzv-endpoint HOST:PORT ...).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

import gradir as gr

HERE = pathlib.Path(__file__).resolve().parent
WORLD = 2
BATCH, SPLIT = 32, (20, 12)  # the global batch, and how many of its examples each rank holds
GPT_BATCH, GPT_SPLIT = 8, (5, 3)
BUCKET_BYTES = 64 * 1024  # small, so the MLP's gradients travel in several buckets


def _load(name: str):
    """An example module of this folder, imported by path (examples are scripts, not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# -- the makemore MLP ------------------------------------------------------------------------------


def mlp_data(path: str) -> tuple[np.ndarray, np.ndarray, int, str]:
    """(X, Y, vocab, what): makemore's training contexts from names.txt, or seeded random tokens without it."""
    mt = _load("f_makemore_training")
    if pathlib.Path(path).is_file():
        data, vocab = mt.splits(path)
        X, Y = data["train"]
        return X, Y, vocab, f"names.txt ({X.shape[0]:,} training contexts)"
    rng = np.random.default_rng(0)
    X, Y = rng.integers(0, 27, (4096, 3)), rng.integers(0, 27, 4096)
    return X, Y, 27, f"seeded random tokens (names.txt not found at {path})"


def mlp_params(vocab: int) -> dict:
    mt = _load("f_makemore_training")
    p = mt.init_params(vocab, 200, np.random.default_rng(mt.SEED))
    return {k: p[k] for k in ("C", "W1", "b1", "W2", "b2")}  # no BatchNorm gain/bias (see the docstring)


def mlp_loss(p, X, Y):
    """Mean cross-entropy of the makemore MLP on the batch (X: contexts of 3 characters, Y: the next one)."""
    n = X.shape[0]
    h = gr.tanh(p["C"][X].reshape(n, -1) @ p["W1"] + p["b1"])
    return gr.nn.cross_entropy(h @ p["W2"] + p["b2"], Y)


def mlp_batches(X, Y, steps: int):
    """The global batches: seeded draws of 32 examples, the last one only 20 (an epoch's tail)."""
    rng = np.random.default_rng(1)
    out = []
    for k in range(steps):
        ix = rng.integers(0, X.shape[0], BATCH if k < steps - 1 else SPLIT[0])
        out.append((X[ix], Y[ix]))
    return out


# -- the GPT-style decoder -------------------------------------------------------------------------


def gpt_batches(steps: int):
    dec = _load("i_small_decoder")
    rng = np.random.default_rng(7)
    out = []
    for _ in range(steps):
        seq = rng.integers(0, dec.VOCAB, (GPT_BATCH, dec.T + 1))
        out.append((seq[:, :-1], seq[:, 1:]))
    return out


def gpt_loss(p, tokens, targets):
    """i_small_decoder's loss: the mean next-token cross-entropy of its two-block decoder (any batch size)."""
    return _load("i_small_decoder").loss_fn(p, tokens, targets)


# -- the runs ----------------------------------------------------------------------------------------


def rows_of(rank: int, split: tuple, batch):
    """This rank's rows of a global batch: the first split[0] to rank 0, the rest to rank 1."""
    lo = sum(split[:rank])
    n = split[rank] if rank < len(split) - 1 else batch[0].shape[0] - lo
    n = max(0, min(n, batch[0].shape[0] - lo))
    return tuple(b[lo:lo + n] for b in batch)


def run_rank(args, rank: int) -> dict:
    """One rank's data-parallel runs of both models (torch.distributed already initialised)."""
    X, Y, vocab, _ = mlp_data(args.data)
    record: dict = {"rank": rank}
    jobs = [("mlp", mlp_loss, mlp_params(vocab), gr.optim.sgd(0.1), mlp_batches(X, Y, args.steps), SPLIT)]
    if args.gpt_steps:
        jobs.append(("gpt", gpt_loss, _load("i_small_decoder").init_params(), gr.optim.adam(1e-2),
                     gpt_batches(args.gpt_steps), GPT_SPLIT))
    for name, loss, params, opt, batches, split in jobs:
        dp = gr.distributed.DataParallel(loss, opt, bucket_bytes=BUCKET_BYTES)
        params, state = dp.init(params)
        losses, counts, timelines, start = [], [], [], time.perf_counter()
        for batch in batches:
            value, params, state = dp.step(params, state, *rows_of(rank, split, batch))
            losses.append(float(value))
            counts.append(dp.last["counts"])
            timelines.append(dp.last["timeline_ms"])
        record[name] = {"losses": losses, "counts": counts, "digest": gr.distributed.tree_digest((params, state)),
                        "plan": dp.plan.text(), "buckets": len(dp.plan.buckets), "timelines": timelines,
                        "steps_left": [dp.plan.num_steps - 1 - b.launch_step for b in dp.plan.buckets],
                        "seconds": time.perf_counter() - start,
                        "overlapped": dp.last["overlapped"] or None}
    return record


def single_process(args) -> dict:
    """The reference: the same models, initialisation and global batches, in one process (gr.train's step)."""
    X, Y, vocab, what = mlp_data(args.data)
    out = {"data": what}
    jobs = [("mlp", mlp_loss, mlp_params(vocab), gr.optim.sgd(0.1), mlp_batches(X, Y, args.steps))]
    if args.gpt_steps:
        jobs.append(("gpt", gpt_loss, _load("i_small_decoder").init_params(), gr.optim.adam(1e-2),
                     gpt_batches(args.gpt_steps)))
    for name, loss, params, opt, batches in jobs:
        step = gr.train.train_step(loss, opt)
        state = opt.init(params)
        losses = []
        for batch in batches:
            value, params, state = step(params, state, *batch)
            losses.append(float(value))
        out[name] = losses
    # the weighting, on the first MLP batch: the weighted sum of the ranks' means vs their plain average
    batch = mlp_batches(X, Y, max(args.steps, 2))[0]
    p = mlp_params(vocab)
    vg = gr.value_and_grad(mlp_loss)
    full = vg(p, *batch)[1]["W1"]
    means = [vg(p, *rows_of(r, SPLIT, batch))[1]["W1"] for r in range(WORLD)]
    weights = [n / BATCH for n in SPLIT]
    out["weighting"] = {"weighted": float(np.abs(sum(w * m for w, m in zip(weights, means)) - full).max()),
                        "plain_average": float(np.abs(sum(means) / WORLD - full).max())}
    return out


# -- launching ---------------------------------------------------------------------------------------


def spawn(args, argv: list[str]) -> list[dict]:
    """Start WORLD processes of this script on the loopback interface and collect their records."""
    with tempfile.TemporaryDirectory(prefix="gradir-dp-") as tmp:
        results = gr.distributed.launch_local([__file__, *argv], WORLD, timeout_s=args.timeout,
                                              env={"GRADIR_DP_OUT": tmp}, capture=False)
        bad = [r for r, (rc, _) in enumerate(results) if rc]
        if bad:
            raise RuntimeError(f"rank(s) {bad} failed (their errors are printed above)")
        return [json.loads((pathlib.Path(tmp) / f"rank{r}.json").read_text()) for r in range(WORLD)]


def as_rank(args) -> list[dict] | None:
    """Under torchrun (or spawned by `spawn`): train this rank; rank 0 gets every rank's record back."""
    import torch.distributed as dist

    info = gr.distributed.init(timeout_s=args.timeout)
    record = run_rank(args, info.rank)
    out = os.environ.get("GRADIR_DP_OUT")
    if out:  # spawned by this script: the parent reports
        pathlib.Path(out, f"rank{info.rank}.json").write_text(json.dumps(record))
        gr.distributed.finish()
        return None
    records = [None] * info.world_size
    dist.all_gather_object(records, record)
    gr.distributed.finish()
    return records if info.rank == 0 else None


# -- the report ---------------------------------------------------------------------------------------


def compare(name: str, records: list[dict], single: list[float], verbose: bool, show: int = 8) -> dict:
    dp = records[0][name]["losses"]
    diffs = [abs(a - b) for a, b in zip(dp, single)]
    identical = len({r[name]["digest"] for r in records}) == 1
    if verbose:
        print(f"{'step':>6}  {'single process':>16}  {'data parallel':>16}  {'|difference|':>12}")
        idx = list(range(min(show, len(dp))))
        idx += [k for k in range(max(show, len(dp) - 2), len(dp))]
        for j, k in enumerate(idx):
            if j and k != idx[j - 1] + 1:
                print(f"{'...':>6}")
            print(f"{k:>6}  {single[k]:>16.12f}  {dp[k]:>16.12f}  {diffs[k]:>12.1e}")
        print(f"   largest |difference| over {len(dp)} steps: {max(diffs):.1e} (float64 rounding; the target is 1e-6)")
        print(f"   parameters and optimizer state identical on both ranks, bit for bit: {identical} "
              f"({records[0][name]['digest'][:16]}...)")
    return {"losses_dp": dp, "losses_single": single, "max_diff": max(diffs), "ranks_identical": identical,
            "counts": records[0][name]["counts"], "buckets": records[0][name]["buckets"],
            "timelines": records[0][name]["timelines"], "steps_left": records[0][name]["steps_left"],
            "overlapped": records[0][name]["overlapped"]}


def report(args, records: list[dict], verbose: bool) -> dict:
    ref = single_process(args)
    out = {"data": ref["data"], "weighting": ref["weighting"]}
    if verbose:
        mlp = records[0]["mlp"]
        print(f"Data-parallel training on {len(records)} processes (gloo over loopback); data: {ref['data']}\n")
        print("1. Who holds what. Each step, an all-reduce of the ranks' example counts gives N; a rank scales its "
              "mean gradient (and mean loss) by n_r / N before the gradients are summed.")
        first, last = mlp["counts"][0], mlp["counts"][-1]
        print(f"   a full step:  counts {first}, N = {sum(first)}, weights "
              + ", ".join(f"{n}/{sum(first)} = {n / sum(first):.4f}" for n in first))
        print(f"   the last step (an epoch's tail): counts {last}, N = {sum(last)}: rank 1 holds no example, does not "
              "call the loss (the mean of nothing is undefined) and sends zeros, but still joins every all-reduce.")
        w = ref["weighting"]
        print(f"   Why the weights: on the first batch, max |error| of dL/dW1 against the full batch is "
              f"{w['weighted']:.1e} for the weighted sum of the ranks' means, {w['plain_average']:.1e} for their plain "
              "average (wrong whenever the counts differ).\n")
        print("2. The bucket plan. Gradients are copied into contiguous buffers of at most "
              f"{BUCKET_BYTES // 1024} KiB, and each buffer is all-reduced as one message, in this order on every "
              "rank (gloo matches collectives by their order):")
        print("   Each bucket launches after the step of the compiled backward that finishes its last gradient "
              "(gradir.passes.buckets); the steps after it are the ones its all-reduce can overlap:")
        print("   " + mlp["plan"].replace("\n", "\n   "))
        overlapped = mlp["overlapped"]
        if overlapped:
            k = 1 if len(mlp["timelines"]) > 2 else 0  # a full step (both ranks hold examples), past the first
            t = mlp["timelines"][k]
            starts = ", ".join(f"bucket {i} at {ms:.2f} ms ({left} steps left)"
                               for i, (ms, left) in enumerate(zip(t["launch"], mlp["steps_left"])))
            print(f"   Measured on rank 0 in step {k}, from the start of its forward, the all-reduces started:\n   {starts};")
            print(f"   the forward and backward ended at {t['computed']:.2f} ms, every all-reduce at {t['reduced']:.2f} "
                  "ms. Only a bucket with steps left can overlap\n   the backward; one with 0 starts at its end.")
        else:
            print("   Each bucket's all-reduce ran after the backward (this backend does not report gradients as they "
                  "become final; gr.distributed overlaps when it does).")
        print(f"   ({mlp['seconds']:.1f} s for {len(mlp['losses'])} steps on rank 0, compiling included)\n")
        print("3. The makemore MLP (SGD, lr 0.1), batches of 32 split 20 / 12: the single-process loss on the whole "
              "batch and the data-parallel loss (the count-weighted sum of the ranks' mean losses) per step.")
    out["mlp"] = compare("mlp", records, ref["mlp"], verbose)
    if "gpt" in records[0]:
        if verbose:
            print("\n4. The GPT-style decoder of i_small_decoder.py (2 blocks, causal attention, Adam lr 1e-2), "
                  "batches of 8 random token sequences split 5 / 3:")
        out["gpt"] = compare("gpt", records, ref["gpt"], verbose)
    return out


def main(argv: list[str] | None = None) -> dict | None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(HERE.parents[1] / "shared" / "data" / "names.txt"), help="path to names.txt")
    ap.add_argument("--steps", type=int, default=200, help="steps of the makemore MLP")
    ap.add_argument("--gpt-steps", type=int, default=30, help="steps of the GPT-style decoder (0: skip it)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds before a stuck run is stopped")
    ap.add_argument("--quiet", action="store_true")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    if args.steps < 2:
        ap.error("--steps must be at least 2 (the last step is the one with an empty shard)")
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun, or a process `spawn` started
        records = as_rank(args)
        if records is None:
            return None
    else:
        records = spawn(args, argv)
    return report(args, records, verbose=not args.quiet)


if __name__ == "__main__":
    main()
