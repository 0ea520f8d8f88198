"""Recompute planning: the plan (`plan.py`, the dispatcher), what every plan is made of and the simple policies
(`base.py`), what a plan costs (`report.py`), and the solvers it chooses from: a minimum cut (`mincut.py`),
Revolve's binomial schedule (`revolve.py`) and a MILP (`milp.py`, built on `timeline.py` and `model.py`).

Layer rule: as every pass, imports gradir.util, gradir.core, gradir.ops and passes below it. Inside the
package, imports run plan -> milp -> (model -> timeline), mincut, report -> base: no module imports plan.py."""
