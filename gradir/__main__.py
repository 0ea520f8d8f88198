"""`python -m gradir ...` runs the command line (same as the `gradir` script)."""

from gradir.cli import app

app(prog_name="gradir")
