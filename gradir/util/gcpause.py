"""Pausing Python's cyclic garbage collector while a pass builds a big graph.

Passes allocate millions of small objects (values, tuples, dicts) that live as long as their graph.
The cyclic collector walks every live container each time enough allocations pile up, so on a
100k-node graph it took about half of the pipeline's time while finding nothing: graphs and their
values hold no reference cycles (a value refers to its graph weakly), so reference counting frees
them. Passes run with the collector paused, and so does tracing, the user's function included (cycles
it makes wait for the collector's next run); it resumes as before afterwards. What does form a cycle,
a compiled program kept on the graph it runs (`api._execute`), is collected as before.

What a pass made is handed to the collector's oldest generation when the pause ends (`gc.freeze()`
then `gc.unfreeze()`: two list splices). Left young, the hundreds of thousands of objects a pass
makes on a big graph would be walked by the very next young collection (~70 ms per 100k nodes, once
after every pass) only to be found alive; in the oldest generation they wait for the next full
collection, which also collects any cycle among them.
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
            if not gc.get_freeze_count():  # (a program that froze objects itself keeps them frozen)
                gc.freeze()  # everything to the permanent generation, then all of it back into the oldest
                gc.unfreeze()
            gc.enable()
    return wrapper
