"""The eager front door: `gr.Tensor`, its tape and backward engine, and the tape rules of its ops.

Layer rule: imports gradir.util, gradir.core, gradir.ops, gradir.passes, gradir.backends and itself."""
