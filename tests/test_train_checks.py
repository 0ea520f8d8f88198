"""gr.train checks before it works (issue 24, item 3): unwritable checkpoint and plot paths and optimizer factories
passed uncalled fail before the first step with a message naming the fault; a finished run says "nothing to train"
and what its checkpoint holds (and when the optimizer settings changed), even from a read-only folder; Ctrl-C saves the
steps done, prints a note, and then ends the program with no traceback (exit code 130), returns the partial run, or
raises again, as on_interrupt asks; scores such as accuracy get their own axis in the loss plot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
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


def stopping_at(k_stop, batch):
    def stopping(k):
        if k == k_stop:
            raise KeyboardInterrupt
        return batch(k)
    return stopping


def test_ctrl_c_with_return_gives_the_partial_run_with_a_note_and_no_traceback(tmp_path, capfd):
    params, batch = problem()
    ck = tmp_path / "run.npz"
    result = gr.train(loss, params, gr.optim.sgd(lr=0.1), stopping_at(3, batch), steps=10, checkpoint=ck,
                      plot=tmp_path / "run.svg", backend="numpy", on_interrupt="return")
    err = capfd.readouterr().err
    assert result.interrupted and result.step == 3 and load_checkpoint(ck).step == 3
    assert (tmp_path / "run.svg").exists()
    assert f"interrupted at step 3; checkpoint {ck} holds it" in err and "Traceback" not in err
    assert "interrupted" in repr(result)
    plain = gr.train(loss, params, gr.optim.sgd(lr=0.1), stopping_at(3, batch), steps=10, progress=False,
                     backend="numpy", on_interrupt="return")
    assert plain.note == "interrupted at step 3; no checkpoint holds it (pass checkpoint= to continue later)"


def test_ctrl_c_with_raise_saves_then_raises_again(tmp_path):
    params, batch = problem()
    ck = tmp_path / "run.npz"
    with pytest.raises(KeyboardInterrupt):
        gr.train(loss, params, gr.optim.sgd(lr=0.1), stopping_at(4, batch), steps=10, checkpoint=ck,
                 plot=tmp_path / "run.svg", progress=False, backend="numpy", on_interrupt="raise")
    assert load_checkpoint(ck).step == 4 and (tmp_path / "run.svg").exists()


def test_ctrl_c_exits_130_by_default_after_saving_and_saying_where(tmp_path, capfd):
    params, batch = problem()
    ck = tmp_path / "run.npz"
    with pytest.raises(SystemExit) as info:  # progress=False: the note is printed all the same, the program ends
        gr.train(loss, params, gr.optim.sgd(lr=0.1), stopping_at(2, batch), steps=10, checkpoint=ck,
                 plot=tmp_path / "run.svg", progress=False, backend="numpy")
    assert info.value.code == 130 and info.value.__cause__ is None and info.value.__suppress_context__
    assert load_checkpoint(ck).step == 2 and (tmp_path / "run.svg").exists()
    assert f"interrupted at step 2; checkpoint {ck} holds it (resume=True continues from there)" in capfd.readouterr().err


def test_ctrl_c_in_a_script_ends_it_with_code_130_and_no_traceback(tmp_path):
    """A real SIGINT (the one Ctrl-C sends), raised from the eval_fn after step 3, in a script that trains twice:
    the first run saves its 3 steps and the script ends there, the second run never starts."""
    script = tmp_path / "sweep.py"
    script.write_text(textwrap.dedent('''
        import signal
        import numpy as np
        import gradir as gr

        x = np.random.default_rng(0).normal(size=(8, 3))
        batch = lambda k: (x, x @ np.ones((3, 1)))
        loss = lambda p, x, y: gr.mean((x @ p["w"] - y) ** 2)

        def eval_fn(p, calls=[0]):
            calls[0] += 1
            if calls[0] == 3:
                signal.raise_signal(signal.SIGINT)
            return 0.0

        for lr in (0.1, 0.2):
            gr.train(loss, {"w": np.zeros((3, 1))}, gr.optim.sgd(lr=lr), batch, steps=10, eval_fn=eval_fn,
                     eval_every=1, checkpoint=f"run{lr}.npz", plot=f"run{lr}.svg", backend="numpy")
            print("went on after", lr)
    '''))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr
    assert "interrupted at step 3; checkpoint run0.1.npz holds it (resume=True continues from there)" in done.stderr
    assert "went on" not in done.stdout and not (tmp_path / "run0.2.npz").exists()
    assert load_checkpoint(tmp_path / "run0.1.npz").step == 3 and (tmp_path / "run0.1.svg").exists()


def test_a_bad_on_interrupt_fails_before_the_first_step():
    params, batch = problem()
    counting = Counting(batch)
    with pytest.raises(GradirError, match="on_interrupt must be one of 'exit', 'return', 'raise', got 'quit'"):
        gr.train(loss, params, gr.optim.sgd(lr=0.1), counting, steps=5, progress=False, on_interrupt="quit")
    assert counting.calls == 0


def test_a_finished_checkpoint_in_a_read_only_folder_loads_and_more_steps_fail_up_front(tmp_path):
    params, batch = problem()
    folder = tmp_path / "ro"
    folder.mkdir()
    ck = folder / "run.npz"
    gr.train(loss, params, gr.optim.sgd(lr=0.1), batch, steps=3, checkpoint=ck, progress=False, backend="numpy")
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("the folder stays writable (running as root)")
        again = gr.train(loss, params, gr.optim.sgd(lr=0.1), batch, steps=3, checkpoint=ck, progress=False,
                         backend="numpy")
        assert again.step == 3 and again.note.startswith(f"nothing to train: checkpoint {ck} holds all 3 steps")
        counting = Counting(batch)
        with pytest.raises(CheckpointError, match=f"cannot write the checkpoint {re.escape(str(ck))}: "):
            gr.train(loss, params, gr.optim.sgd(lr=0.1), counting, steps=5, checkpoint=ck, progress=False,
                     backend="numpy")
        assert counting.calls == 0  # steps remained: checked before the first of them
    finally:
        folder.chmod(0o755)


def test_only_a_checkpoint_with_steps_to_train_is_checked_for_writing(tmp_path, monkeypatch):
    """The same as above where root writes anywhere: every folder refuses files, as a read-only one would."""
    params, batch = problem()
    ck = tmp_path / "run.npz"
    gr.train(loss, params, gr.optim.sgd(lr=0.1), batch, steps=3, checkpoint=ck, progress=False, backend="numpy")

    def refuse(path):
        raise PermissionError(13, "Permission denied", str(path))
    monkeypatch.setattr("gradir.training.loop.check_file_writable", refuse)
    again = gr.train(loss, params, gr.optim.sgd(lr=0.1), batch, steps=3, checkpoint=ck, progress=False,
                     backend="numpy")
    assert again.step == 3 and again.note.startswith("nothing to train")
    with pytest.raises(CheckpointError, match="cannot write the checkpoint .*Permission denied"):
        gr.train(loss, params, gr.optim.sgd(lr=0.1), batch, steps=5, checkpoint=ck, progress=False, backend="numpy")
    with pytest.raises(CheckpointError, match="Permission denied"):  # resume=False writes it afresh
        gr.train(loss, params, gr.optim.sgd(lr=0.1), batch, steps=3, checkpoint=ck, resume=False, progress=False)


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
