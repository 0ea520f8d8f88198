"""gr.train checks before it works (issue 24, item 3): unwritable checkpoint and plot paths and optimizer factories
passed uncalled fail before the first step with a message naming the fault; a finished run says "nothing to train"
and what its checkpoint holds (and when the optimizer settings changed); Ctrl-C returns the partial run with a note
and no traceback; scores such as accuracy get their own axis in the loss plot."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import gradir as gr
from gradir.core.errors import CheckpointError, GradirError
from gradir.training.loop import is_metric, load_checkpoint


def loss(p, x, y):
    return gr.mean((x @ p["w"] - y) ** 2)


def problem():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 3))
    return {"w": np.zeros((3, 1))}, lambda k: (x, x @ np.array([[1.0], [2.0], [-1.0]]))


class Counting:
    """Counts the batches asked for: a check that fails before the first step asks for none."""

    def __init__(self, batch):
        self.batch, self.calls = batch, 0

    def __call__(self, k):
        self.calls += 1
        return self.batch(k)


@pytest.mark.parametrize("where", ["missing", "file"])
@pytest.mark.parametrize("what", ["checkpoint", "plot"])
def test_an_unwritable_path_fails_before_the_first_step_naming_it(tmp_path, what, where):
    params, batch = problem()
    (tmp_path / "a_file").write_text("")
    folder = tmp_path / ("no_such_folder" if where == "missing" else "a_file")
    path = folder / ("run.npz" if what == "checkpoint" else "loss.svg")
    counting = Counting(batch)
    error = CheckpointError if what == "checkpoint" else GradirError
    with pytest.raises(error, match=f"cannot write the {what} {re.escape(str(path))}: ") as info:
        gr.train(loss, params, gr.optim.sgd(lr=0.1), counting, steps=5, progress=False, backend="numpy",
                 **{what: path})
    assert ("does not exist" if where == "missing" else "is a file, not a folder") in str(info.value)
    assert counting.calls == 0 and not folder.with_name("no_such_folder").exists()  # nothing trained, nothing made


def test_a_folder_as_checkpoint_path_fails_up_front(tmp_path):
    params, batch = problem()
    with pytest.raises(CheckpointError, match="it is a folder, not a file"):
        gr.train(loss, params, gr.optim.sgd(lr=0.1), batch, steps=5, checkpoint=tmp_path, progress=False)


@pytest.mark.parametrize(("opt", "message"), [
    (gr.optim.adam, "gr.optim.adam is a factory: call it, gr.optim.adam(lr=...)"),
    (gr.optim.sgd, "gr.optim.sgd is a factory: call it, gr.optim.sgd(lr=...)"),
    (gr.amp.mixed_precision, "gr.amp.mixed_precision is a factory: call it, gr.amp.mixed_precision("),
    (lambda lr=0.1: gr.optim.sgd(lr), "is a function, not an optimizer"),
    (gr.optim.Optimizer, "the optimizer Optimizer is a class: pass an instance"),
    (0.1, "the optimizer must have init(params) and update(grads, state, params)"),
])
def test_an_optimizer_passed_uncalled_is_a_clear_error(opt, message):
    params, batch = problem()
    with pytest.raises(GradirError, match=re.escape(message)):
        gr.train(loss, params, opt, batch, steps=2, progress=False)


def test_a_finished_run_says_nothing_to_train_and_what_its_checkpoint_holds(tmp_path, capfd):
    params, batch = problem()
    ck = tmp_path / "run.npz"
    done = gr.train(loss, params, gr.optim.adam(lr=0.01), batch, steps=4, checkpoint=ck, progress=False,
                    backend="numpy")
    before = ck.read_bytes()
    again = gr.train(loss, params, gr.optim.adam(lr=0.01), batch, steps=4, checkpoint=ck, backend="numpy")
    err = capfd.readouterr().err
    assert again.note.startswith(f"nothing to train: checkpoint {ck} holds all 4 steps (loss ")
    assert "changed" not in again.note and "optimizer" not in again.note
    assert "nothing to train" in err and "4/4" not in err  # the note, not a progress bar stuck at the end
    assert again.step == 4 and again.losses == done.losses and ck.read_bytes() == before
    np.testing.assert_array_equal(again.params["w"], done.params["w"])

    changed = gr.train(loss, params, gr.optim.adam(lr=0.5), batch, steps=4, checkpoint=ck, progress=False,
                       backend="numpy")
    assert f"its optimizer was {gr.optim.adam(lr=0.01)!r}, this call's is {gr.optim.adam(lr=0.5)!r}" in changed.note
    assert "which no step used: resume=False trains afresh with it" in changed.note


def test_resuming_with_other_optimizer_settings_says_so(tmp_path):
    params, batch = problem()
    ck = tmp_path / "run.npz"
    gr.train(loss, params, gr.optim.adam(lr=0.01), batch, steps=2, checkpoint=ck, progress=False, backend="numpy")
    more = gr.train(loss, params, gr.optim.adam(lr=0.5), batch, steps=4, checkpoint=ck, progress=False,
                    backend="numpy")
    assert more.step == 4 and more.note.startswith(f"resumed from step 2 of checkpoint {ck}; its optimizer was "
                                                   "gr.optim.adam(lr=0.01")
    assert "this call's is gr.optim.adam(lr=0.5" in more.note


def test_an_iterable_that_ran_out_at_the_checkpoint_says_nothing_to_train(tmp_path):
    params, batch = problem()
    data = [batch(k) for k in range(3)]
    ck = tmp_path / "run.npz"
    gr.train(loss, params, gr.optim.sgd(lr=0.1), data, checkpoint=ck, progress=False, backend="numpy")
    again = gr.train(loss, params, gr.optim.sgd(lr=0.1), data, checkpoint=ck, progress=False, backend="numpy")
    assert again.step == 3 and again.note == f"nothing to train: the batches run out at step 3, where checkpoint {ck} already is"


def test_ctrl_c_returns_the_partial_run_with_a_note_and_no_traceback(tmp_path, capfd):
    params, batch = problem()

    def stopping(k):
        if k == 3:
            raise KeyboardInterrupt
        return batch(k)

    ck = tmp_path / "run.npz"
    result = gr.train(loss, params, gr.optim.sgd(lr=0.1), stopping, steps=10, checkpoint=ck, backend="numpy")
    err = capfd.readouterr().err
    assert result.interrupted and result.step == 3 and load_checkpoint(ck).step == 3
    assert f"interrupted at step 3; checkpoint {ck} holds it" in err and "Traceback" not in err
    assert "interrupted" in repr(result)
    plain = gr.train(loss, params, gr.optim.sgd(lr=0.1), stopping, steps=10, progress=False, backend="numpy")
    assert plain.note == "interrupted at step 3; no checkpoint holds it (pass checkpoint= to continue later)"


def test_scores_get_their_own_axis_in_the_loss_plot(tmp_path):
    assert [n for n in ("val", "val_loss", "accuracy", "val_acc", "top1", "F1", "nll", "acceleration")
            if is_metric(n)] == ["accuracy", "val_acc", "top1", "F1"]
    params, batch = problem()
    out = tmp_path / "loss.svg"
    gr.train(loss, params, gr.optim.sgd(lr=0.1), batch, steps=6, eval_every=2, progress=False, backend="numpy",
             eval_fn=lambda p: {"val_loss": 1.0, "val_acc": 0.5}, plot=out)
    texts = [t.text for t in ET.parse(out).getroot().iter("{http://www.w3.org/2000/svg}text") if t.text]
    assert "loss" in texts and "val_acc" in texts  # the left axis' label and the right axis' label
    chosen = tmp_path / "chosen.svg"  # metrics= chooses by hand
    gr.train.plot_losses(chosen, [(0, 1.0)], [(1, {"val_loss": 0.9, "bits": 3.0})], metrics=["bits"])
    labels = [t.text for t in ET.parse(chosen).getroot().iter("{http://www.w3.org/2000/svg}text") if t.text]
    assert labels.count("bits") == 2  # the right axis' label and the legend's entry
