"""PyTorch model files for the command line: `model()` returns an `nn.Module`.

Convention (docs/pytorch.md): `model()` takes no arguments and returns the module;
`example_inputs()` returns the forward's arguments, then the loss's targets; `loss(output, *targets)`,
written with torch ops, is optional (without it the module's output is differentiated: a bigger tensor's
sum, a model output's "loss", with a note on stderr saying which; several outputs need a loss). The
module is captured with `gr.from_torch` together with the loss, and the CLI traces `loss_of(params,
*inputs, *targets)`, differentiated with respect to `params`, a dict named by module path
(`blocks.0.attn.qkv.weight`), so reports and diagrams name parameters as the module does.
"""

from __future__ import annotations

import inspect
import os
import sys
from types import ModuleType

from gradir.frontends.with_loss import capture_with_loss


class TorchModelError(Exception):
    """A torch model file that breaks the convention (the CLI reports it in one line)."""


def _takes_no_arguments(fn) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)


def torch_module(module: ModuleType):
    """The nn.Module the file's `model()` returns, or None when the file is not a torch model file."""
    torch = sys.modules.get("torch")  # a torch model file has imported it; gradir never does here
    make = getattr(module, "model", None)
    if torch is None or not callable(make) or not _takes_no_arguments(make):
        return None
    net = make()
    if isinstance(net, type) and issubclass(net, torch.nn.Module):  # `return MLP` for `return MLP()`
        raise TorchModelError(f"model() returns the class {net.__name__}, not a module: return an instance, "
                              f"{net.__name__}(...)")
    return net if isinstance(net, torch.nn.Module) else None


def _target_count(loss) -> int:
    """How many targets `loss(output, *targets)` takes after the output (its positional parameters)."""
    params = list(inspect.signature(loss).parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        raise TorchModelError("loss(output, *targets) must name its targets (no *args): their number splits "
                              "example_inputs() into the forward's arguments and the targets")
    return len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) - 1


def loss_function(module: ModuleType, net):
    """(loss_of(params, *inputs), params, example inputs) for a torch model file whose `model()` made `net`."""
    if not callable(getattr(module, "example_inputs", None)):
        raise TorchModelError("model() returns a torch module: define example_inputs() returning its forward's "
                              "arguments (then the loss's targets)")
    inputs = module.example_inputs()
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    loss = getattr(module, "loss", None)
    loss = loss if callable(loss) else None
    k = len(inputs) - (_target_count(loss) if loss is not None else 0)
    if k < 0:
        raise TorchModelError(f"loss takes {_target_count(loss)} target(s) but example_inputs() returns "
                              f"{len(inputs)} value(s)")
    loss_of, params = capture_with_loss(net, inputs, loss, k)
    for note in loss_of.notes:  # which scalar is differentiated, outputs left out: once, on stderr
        print(f"gradir: note: {os.path.basename(getattr(module, '__file__', None) or 'model')}: {note}", file=sys.stderr)
    loss_of.__name__ = "loss" if loss is not None else "model"
    # what inspect.unwrap finds: errors about loss_of (gradcheck's, the CLI's) then name a line of the
    # model file, not of gradir's with_loss.py
    loss_of.__wrapped__ = _in_file(module, loss, net.forward) or module.model
    return loss_of, params, inputs


def _in_file(module: ModuleType, *fns):
    """The first of `fns` whose code is in the model file (a Sequential's forward is torch's, not the user's)."""
    where = os.path.abspath(getattr(module, "__file__", None) or "")
    for fn in fns:
        code = getattr(fn, "__code__", None)
        if code is not None and os.path.abspath(code.co_filename) == where:
            return fn
    return None


__all__ = ["TorchModelError", "loss_function", "torch_module"]
