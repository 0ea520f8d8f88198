"""The one ATen -> gradir op table (DESIGN rule 8): ATen op name -> a small function over gradir ops.

The entries live by family beside this module (aten_math: elementwise ops and reductions; aten_shapes: views,
indexing, index writes and creation; aten_linalg: matrix products and torch.linalg; aten_nn: gr.nn's ops;
aten_extra: as_strided and upsampling) and are assembled here into one `TABLE`, which is all the frontend
looks up. A name defined by two families is an error at import: one op, one place.

Keys are ATen names without the namespace: an overload (``"div.Tensor_mode"``) when it differs from
its siblings, else the overload packet (``"add"`` covers add.Tensor and add.Scalar). Each function
takes the node's arguments with FX nodes replaced by gradir values (NumPy arrays when evaluated
eagerly, traced Values inside a trace) and returns a value, a list, or a `Multi` for ATen ops that
return several tensors (native_layer_norm's out, mean, rstd) of which the graph may use only some.

torch is not imported here: dtypes arrive as torch dtype objects and are read by name.
"""

from __future__ import annotations

from gradir.frontends.aten_common import Multi, NeedsSeed, np_dtype
from gradir.frontends.aten_extra import EXTRA, InPlace, NeedsLayout
from gradir.frontends.aten_linalg import LINALG
from gradir.frontends.aten_math import ELEMENTWISE, REDUCTIONS
from gradir.frontends.aten_nn import NN
from gradir.frontends.aten_shapes import CREATION, SHAPES


def _assemble(**families: dict) -> dict:
    table: dict = {}
    for family, entries in families.items():
        twice = sorted(set(table) & set(entries))
        if twice:
            raise RuntimeError(f"ATen ops mapped twice (again in {family}): {', '.join(twice)}")
        table.update(entries)
    return table


TABLE: dict = _assemble(elementwise=ELEMENTWISE, reductions=REDUCTIONS, linalg=LINALG, shapes=SHAPES,
                        creation=CREATION, nn=NN, extra=EXTRA)
"""ATen name (overload or packet, without "aten.") -> function over gradir ops."""


def lookup(name: str, overload: str):
    """The table entry for aten `name`.`overload` (the overload's own entry first), or None. A view op's
    `_copy` form (what functionalization on the make_fx path emits: `split_copy`, `view_copy`) is the
    view op itself here: gradir values are immutable, so a view and a copy compute the same."""
    entry = TABLE.get(f"{name}.{overload}") or TABLE.get(name)
    if entry is None and name.endswith("_copy") and name not in ("_to_copy", "lift_fresh_copy"):
        return lookup(name.removesuffix("_copy"), overload)
    return entry


__all__ = ["CREATION", "ELEMENTWISE", "LINALG", "NN", "REDUCTIONS", "SHAPES", "TABLE", "InPlace", "Multi",
           "NeedsLayout", "NeedsSeed", "lookup", "np_dtype"]
