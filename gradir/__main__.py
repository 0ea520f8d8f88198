"""`python -m gradir ...` runs the command line (same as the `gradir` script)."""

from gradir.cli.app import app

app(prog_name="gradir")
