"""The core: errors, dtypes, source lines, the SSA IR, primitives, the tracer and the rule queries.

Layer rule: imports gradir.util and itself only. Order inside: errors, dtypes, interop, source, kernels,
primitive, ir, trace, seed, rules (each imports only modules before it)."""
