"""Regenerate the diagram the README shows: `python docs/make_readme_diagram.py`.

It draws the joint forward + backward graph of TEACHING.md A's L = tanh(a*b + a) (the model file
examples/models/tanh_scalar.py): the saved tensors are the orange edges from forward to backward.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import gradir as gr
from gradir.util.fileio import write_atomic
from gradir.viz import joint_diagram, render_svg

HERE = pathlib.Path(__file__).resolve().parent
MODEL = HERE.parent / "examples" / "models" / "tanh_scalar.py"
OUT = HERE / "tanh_scalar.joint.svg"


def main() -> int:
    spec = importlib.util.spec_from_file_location("tanh_scalar", MODEL)
    model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model)
    j = gr.trace_grad(model.loss, *model.example_inputs(), argnums=(0, 1))
    rendered = render_svg(joint_diagram(j))
    if rendered.svg is None:
        print(f"could not draw: {rendered.error}", file=sys.stderr)
        return 1
    write_atomic(OUT, rendered.svg)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
