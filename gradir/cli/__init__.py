"""The `gradir` command line: the typer app, model-file loading and the reports it prints.

Layer rule: the top layer; imports any layer below (never the face `gradir`)."""
