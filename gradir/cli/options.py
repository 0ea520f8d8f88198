"""The command line's options that need more than typer checks: sizes (--budget, --buckets), the recompute plan
(--remat, --budget, --segments), output files (-o, --plot: their folder must exist) and --backend, each a one-line
CLIError before any work or output."""

from __future__ import annotations

import decimal
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradir.passes.remat.plan import POLICIES as REMAT_POLICIES
from gradir.passes.report import human_bytes
from gradir.util.outfolder import check_file_writable

EXIT_USAGE = 2   # the model file or the command line is at fault
PLOT_SUFFIXES = (".svg", ".png", ".pdf", "")  # --plot's formats, by extension (none: svg)
KERNEL_BACKENDS = ("llvm",)  # the compiled backends `gradir trace --backend` lists the fused kernels of


class CLIError(Exception):
    """A one-line error for stderr; `code` becomes the exit status."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(" ".join(message.split()))  # one line, whatever the message held
        self.code = code


SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
              "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
SIZE_SYNTAX = ("write bytes (1000000) or a number with a unit: B, KB, MB, GB, TB (powers of 1000) or "
               "KiB, MiB, GiB, TiB (powers of 1024), e.g. 4MiB, 512KiB, 1.5GB")


def parse_size(text: str, option: str = "--budget") -> int:
    """Bytes from a size such as ``4MiB``, ``512 KiB``, ``1.5GB``, ``1000000`` or ``4,250 B`` (units are
    case-insensitive; KB/MB/GB are powers of 1000, KiB/MiB/GiB powers of 1024), rounded to the nearest
    whole byte, so the sizes gradir prints (``4.15 KiB``) read back. A CLIError names what is wrong."""
    stripped = text.strip()
    number = stripped.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ")
    unit = stripped[len(number):].strip().lower()
    if re.fullmatch(r"\d{1,3}(,\d{3})+(\.\d*)?", number):  # thousands separators, as in "4,250 B"
        number = number.replace(",", "")
    try:
        value = decimal.Decimal(number)
    except decimal.InvalidOperation:
        value = None
    if value is None or not value.is_finite() or unit not in SIZE_UNITS:
        raise CLIError(f"{option} {text!r} is not a size: {SIZE_SYNTAX}")
    if value <= 0:
        raise CLIError(f"{option} {text!r} must be a positive number of bytes")
    size = (value * SIZE_UNITS[unit]).to_integral_value(rounding=decimal.ROUND_HALF_UP)
    if size < 1:
        raise CLIError(f"{option} {text!r} is less than half a byte (it rounds to 0 B)")
    return int(size)


@dataclass
class Remat:
    """The recompute plan asked for on the command line (passes.remat's policies)."""

    policy: str
    budget: int | None = None
    segments: int | None = None

    @classmethod
    def from_options(cls, policy: str | None, budget: str | None, segments: int | None) -> Remat | None:
        """None when no recompute option was given; a CLIError for a bad one."""
        if policy is None and budget is None and segments is None:
            return None
        if policy is not None and policy not in REMAT_POLICIES:
            raise CLIError(f"unknown --remat {policy!r} (have: {', '.join(REMAT_POLICIES)})")
        nbytes = None if budget is None else parse_size(budget)
        policy = policy or ("optimal" if nbytes is not None else "uniform")
        if nbytes is not None and policy != "optimal":  # the heuristics never look at a budget: not silently
            raise CLIError(f"--budget is an option of --remat optimal, the policy that plans under a budget; "
                           f"--remat {policy} does not look at one (its report gives the activation peak it reaches)")
        if segments is not None and policy != "uniform":
            raise CLIError(f"--segments is an option of --remat uniform, not of --remat {policy}")
        if segments is not None and segments < 1:
            raise CLIError(f"--segments {segments} must be at least 1")
        return cls(policy, nbytes, segments)

    def keywords(self) -> dict:
        kw: dict[str, Any] = {"remat": self.policy, "memory_budget": self.budget}
        if self.segments is not None:
            kw["segments"] = self.segments
        return kw

    def summary(self, report) -> str:
        """One line: what the plan keeps, what it recomputes, what it costs."""
        d = report.to_dict()
        opts = ", ".join(f"{k}={v}" for k, v in d["options"].items() if k in ("segments", "keep_ops"))
        if d["optimal"] is not None:  # the planner's note: the gap it proved and the time limit it ran under
            opts = ", ".join(filter(None, [opts, d["note"] if d["optimal"] else f"not proven optimal: {d['note']}"]))
        budget = f" (budget {human_bytes(self.budget, exact=True)})" if self.budget is not None else ""
        return (f"{d['policy']}{f' ({opts})' if opts else ''}: {d['saved_count']} activations saved "
                f"({human_bytes(d['saved_bytes'], exact=True)}), {d['recomputed_ops']} ops recomputed "
                f"({d['recompute_flops']:,} flops), {d['block_calls']} block calls for {d['blocks']} blocks, "
                f"activation peak {human_bytes(d['peak_bytes'], exact=True)}{budget}")


def check_backend(backend: str | None) -> None:
    """--backend names a compiled backend with kernel listings (checked before anything is printed)."""
    if backend is not None and backend not in KERNEL_BACKENDS:
        raise CLIError(f"unknown --backend {backend!r} (kernel listings exist for: {', '.join(KERNEL_BACKENDS)})")


def check_output_file(path: Path | None, option: str, suffixes: tuple[str, ...] | None = None) -> Path | None:
    """An output file (-o/--output, --plot) can be written: its folder exists (it is not created) and takes a
    file, and its extension is one of `suffixes` (when given). Checked before the work, so a typo fails at once."""
    if path is not None:
        if suffixes is not None and Path(path).suffix.lower() not in suffixes:
            raise CLIError(f"{option} {path}: the format is taken from the extension: "
                           f"{', '.join(x for x in suffixes if x)} (or none, for svg)")
        try:
            check_file_writable(path)
        except OSError as e:
            raise CLIError(f"cannot write {option} {path}: {e.strerror or e}") from None
    return path


def check_segments(remat: Remat | None, blocks: int, name: str) -> None:
    """--segments within the model's range: 1 to its number of blocks (a plan never cuts more segments)."""
    if remat is not None and remat.segments is not None and remat.segments > blocks:
        raise CLIError(f"--segments {remat.segments} is more than the {blocks} block{'s' * (blocks != 1)} of {name}: "
                       f"choose 1 to {blocks} (a segment is one or more consecutive blocks)")
