"""The functional API: tracing and transformations (trace, grad, vjp, jvp, compile, checkpoint), the inspection
object of `gr.trace_grad`, gradient checks, shape specs, the compile cache and notebook display.

Layer rule: imports gradir.util, gradir.core, gradir.ops, gradir.passes, gradir.backends, gradir.viz and itself."""
