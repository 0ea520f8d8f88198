"""Per-function caches of traced and transformed graphs, for the eager transformations.

`gr.grad`, `gr.value_and_grad`, `gr.vjp` and `gr.jvp` trace, differentiate and compile a function the
first time they meet an input signature (pytree structure, shapes, dtypes, static keyword arguments)
and reuse that work on later calls with the same signature, as `gr.compile` does. Like `gr.compile`,
a cached graph holds what the function read while it was traced: arrays and Python values it closes
over are baked in as constants. Pass data that changes as arguments, or call `gr.clear_caches()`.

What the entries are keyed by: for `grad` and `value_and_grad`, the function they return (like a
`gr.compile` object: `g = gr.grad(f)` reuses its traces, a new `gr.grad(f)` starts afresh); for `vjp`
and `jvp`, which return no function, the function differentiated. Keys are weak, so entries go with
their function; each keeps at most `MAX_ENTRIES` signatures (the oldest is dropped first).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

MAX_ENTRIES = 32

_caches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def lookup(fn: Callable, key: Any, build: Callable[[], Any]) -> Any:
    """The entry for (`fn`, `key`), built by `build()` on a miss. Functions that cannot be weakly
    referenced (or keys that cannot be hashed) are not cached: `build()` runs every time."""
    try:
        entries = _caches.get(fn)
        if entries is None:
            entries = _caches[fn] = OrderedDict()
        entry = entries.get(key)
    except TypeError:
        return build()
    if entry is None:
        entry = entries[key] = build()
        if len(entries) > MAX_ENTRIES:
            entries.popitem(last=False)
    else:
        entries.move_to_end(key)
    return entry


def clear_caches() -> None:
    """Forget every cached graph of gr.grad / value_and_grad / vjp / jvp (gr.compile'd functions keep
    their own caches: make a new `gr.compile` object to start over)."""
    _caches.clear()


def cache_size(fn: Callable) -> int:
    """How many input signatures of `fn` the eager transformations have cached."""
    try:
        return len(_caches.get(fn, ()))
    except TypeError:
        return 0
