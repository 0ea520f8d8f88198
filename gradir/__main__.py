"""`python -m gradir ...` runs the command line (same as the `gradir` script)."""

from gradir.cli.app import app

if __name__ == "__main__":  # importing this module (documentation tools walk the package) runs nothing
    app(prog_name="gradir")
