"""Diagrams, plots and HTML reports of graphs and plans (reads graphs and reports only)."""
