"""Example F, data parallel: the makemore MLP and a GPT-style decoder trained on 2 processes (gloo, loopback)
match single-process training step for step (float64), with unequal shards and an empty one in the last step."""

from __future__ import annotations

import pytest
from examples_util import load, run

pytest.importorskip("torch.distributed")


def test_data_parallel_matches_single_process(tmp_path):
    figures, text = run(load("f_data_parallel"), ["--steps", "4", "--gpt-steps", "2", "--timeout", "120",
                                                   "--data", str(tmp_path / "absent.txt")])
    assert figures["data"].startswith("seeded random tokens")  # the fallback without names.txt
    mlp, gpt = figures["mlp"], figures["gpt"]
    assert mlp["counts"][0] == [20, 12] and mlp["counts"][-1] == [20, 0]  # unequal, then an empty shard
    assert len(mlp["losses_dp"]) == 4 and len(gpt["losses_dp"]) == 2
    assert mlp["max_diff"] <= 1e-6 and gpt["max_diff"] <= 1e-6
    assert mlp["ranks_identical"] and gpt["ranks_identical"]
    assert mlp["buckets"] >= 2
    w = figures["weighting"]
    assert w["weighted"] < 1e-12 < 1e-3 < w["plain_average"]  # the plain average of rank means is wrong
    for phrase in ("Who holds what", "The bucket plan", "largest |difference|", "identical on both ranks"):
        assert phrase in text
    # the overlap is worded to what is shown: each bucket's measured start, its steps left, and when the program ended
    assert "started as soon as its last gradient was final" not in text
    if mlp["overlapped"]:
        t = mlp["timelines"][1]
        assert len(t["launch"]) == mlp["buckets"] == len(mlp["steps_left"]) and mlp["steps_left"][-1] == 0
        assert all(a <= b for a, b in zip(t["launch"], t["launch"][1:]))  # buckets start in plan order
        assert t["launch"][0] <= t["computed"] <= t["reduced"]
        assert f"bucket 0 at {t['launch'][0]:.2f} ms ({mlp['steps_left'][0]} steps left)" in text
        assert f"ended at {t['computed']:.2f} ms" in text
