"""Pausing Python's cyclic garbage collector while a pass builds a big graph.

Passes allocate millions of small objects (values, tuples, dicts) that live as long as their graph.
The cyclic collector walks every live container each time enough allocations pile up, so on a
100k-node graph it took about half of the pipeline's time while finding nothing: graphs and their
values hold no reference cycles (a value refers to its graph weakly), so reference counting frees
them. Passes run with the collector paused, and so does tracing, the user's function included (cycles
it makes wait for the collector's next run); it resumes as before afterwards. What does form a cycle,
a compiled program kept on the graph it runs (`api._execute`), is collected as before.
"""

from __future__ import annotations

import functools
import gc


def gc_paused(fn):
    """Run `fn` with the cyclic garbage collector paused (nesting is fine)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()
    return wrapper
