"""One rank of a tests/test_distributed.py scenario: python tests/distributed_worker.py SCENARIO OUT, with torchrun's
environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; gr.distributed.launch_local sets it).

Writes OUT/rank{RANK}.json (digests, losses) and .npz (arrays) for the test to compare; errors go to stderr."""

from __future__ import annotations

import json
import os
import sys

import numpy as np

import gradir as gr
from gradir.training.distributed import tree_digest

COUNTS = [(3, 4, 0), (4, 3, 0), (0, 3, 4)]  # examples per rank in each step (7 in all): unequal, one empty
STEPS = 24


def init_params(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"W1": rng.standard_normal((4, 6)), "b1": 0.1 * rng.standard_normal(6),
            "W2": rng.standard_normal((6, 3)) / 6 ** 0.5, "b2": 0.1 * rng.standard_normal(3)}


def loss(p, X, Y):
    """Mean squared error of a small tanh MLP: the mean over the batch's examples."""
    h = gr.tanh(X @ p["W1"] + p["b1"])
    return gr.mean(gr.sum((h @ p["W2"] + p["b2"] - Y) ** 2, axis=1))


def batch(k: int, n: int = 7):
    rng = np.random.default_rng(100 + k)
    return rng.standard_normal((n, 4)), rng.standard_normal((n, 3))


def shard(k: int, rank: int, world: int):
    """Rank `rank`'s rows of global batch k, split by COUNTS (2 ranks: the first two counts' sum stays 7)."""
    counts = COUNTS[k % len(COUNTS)]
    counts = counts if world == 3 else (counts[0], counts[1] + counts[2])
    X, Y = batch(k)
    lo = sum(counts[:rank])
    return X[lo:lo + counts[rank]], Y[lo:lo + counts[rank]]


def train(dp, params, state, rank, world, start, stop, record):
    losses = []
    for k in range(start, stop):
        value, params, state = dp.step(params, state, *shard(k, rank, world))
        losses.append(float(value))
        record.setdefault("counts", []).append(dp.last["counts"])
    return params, state, losses


def main(scenario: str, out: str) -> None:
    info = gr.distributed.init(timeout_s=float(os.environ.get("DIST_TIMEOUT", 30)))  # torchrun's environment
    rank, world = info.rank, info.world_size
    record: dict = {"rank": rank, "world": world}
    arrays: dict = {}
    opt = gr.optim.adam(lr=0.05)
    if scenario == "train":
        # 1. one step of SGD: the all-reduced gradient is the full-batch gradient
        dp = gr.distributed.DataParallel(loss, gr.optim.sgd(0.1), overlap=False)
        params, state = dp.init(init_params(seed=rank))  # every rank starts from rank 0's parameters
        dp.step(params, state, *shard(0, rank, world))
        arrays.update({f"grad/{k}": v for k, v in dp.last_grads.items()})
        arrays.update({f"init/{k}": v for k, v in params.items()})
        # 2. Adam for STEPS steps, all-reduce after the backward vs overlapped (schedule plan, small buckets)
        for name, overlap in (("plain", False), ("overlap", True)):
            dp = gr.distributed.DataParallel(loss, opt, overlap=overlap, bucket_bytes=200)
            params, state = dp.init(init_params(seed=rank))
            params, state, losses = train(dp, params, state, rank, world, 0, STEPS, record)
            record[name] = {"digest": tree_digest((params, state)), "losses": losses, "plan": dp.plan.to_dict(),
                            "overlapped": dp.last["overlapped"], "launched_at": dp.last["launched_at"]}
            arrays.update({f"{name}/{k}": v for k, v in params.items()})
    elif scenario == "resume_first":  # STEPS straight, and STEPS // 2 then a checkpoint
        dp = gr.distributed.DataParallel(loss, opt)
        params, state = dp.init(init_params())
        p, s, losses = train(dp, params, state, rank, world, 0, STEPS, record)
        record["straight"] = {"digest": tree_digest((p, s)), "losses": losses}
        p, s, losses = train(dp, params, state, rank, world, 0, STEPS // 2, record)
        dp.save_checkpoint(os.path.join(out, "run.npz"), p, s, STEPS // 2, losses=list(enumerate(losses)))
        record["first_half"] = losses
    elif scenario == "resume_second":  # fresh processes: load, continue to STEPS
        dp = gr.distributed.DataParallel(loss, opt)
        ck = dp.load_checkpoint(os.path.join(out, "run.npz"))
        ck2 = dp.load_checkpoint(os.path.join(out, "run.npz"), broadcast=True)
        record["same_both_ways"] = tree_digest((ck.params, ck.state)) == tree_digest((ck2.params, ck2.state))
        p, s, losses = train(dp, ck.params, ck.state, rank, world, ck.step, STEPS, record)
        record["resumed"] = {"digest": tree_digest((p, s)), "losses": losses, "from": ck.step}
    elif scenario in ("raise_in_loss", "raise_outside"):
        def bad_loss(p, X, Y):
            if rank == 1:
                raise ValueError("boom on rank 1")
            return loss(p, X, Y)
        dp = gr.distributed.DataParallel(loss if scenario == "raise_outside" else bad_loss, opt)
        params, state = dp.init(init_params())
        for k in range(3):
            if scenario == "raise_outside" and rank == 1 and k == 1:
                raise RuntimeError("rank 1 crashed between steps")
            _, params, state = dp.step(params, state, *shard(k, rank, world))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)
    np.savez(os.path.join(out, f"rank{rank}.npz"), **arrays)
    gr.distributed.finish()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
