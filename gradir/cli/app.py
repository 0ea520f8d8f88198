"""The `gradir` command line: trace a function from a model file and show its backward story.

    gradir trace examples/models/mlp.py            # forward IR, backward IR, saved values
    gradir trace model.py --fn step --argnums w,b  # another function, chosen arguments
    gradir check examples/models/mlp.py            # gradcheck against central differences
    gradir schedule model.py --policy memory       # the backward schedule, step by step
    gradir schedule model.py --buckets 1MiB        # ... and the data-parallel all-reduce buckets
    gradir memory model.py --format json           # the memory plan
    gradir memory model.py --remat optimal --budget 4MiB   # with a recompute plan under a budget

A model file is plain Python. Its function (`--fn`, default `loss`, then `model`, then the only
function in the file) gets example inputs from `example_inputs()` or from shape annotations such as
`x: gr.f32[32, 256]` (see gradir.api.specs). Problems with the file are reported in one line on stderr
with exit code 2, never as a traceback.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import inspect
import io
import sys
import traceback
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from gradir.api import checks
from gradir.api.specs import CONVENTION, SpecDType, TensorSpec, default_argnums, resolve_example
from gradir.api.transforms import trace_grad
from gradir.cli.nonfinite import nonfinite_inputs
from gradir.cli.options import (
    PLOT_SUFFIXES,
    CLIError,
    Remat,
    check_backend,
    check_output_file,
    check_segments,
    parse_size,
)
from gradir.cli.reports import FORMATS, View, as_json, check_format, emit, fold_composites
from gradir.cli.torch_models import TorchModelError, loss_function, torch_module
from gradir.core import dtypes
from gradir.core.errors import GradirError, ModelFileError
from gradir.core.ir import Graph
from gradir.passes import autodiff_pipeline
from gradir.passes.remat.plan import POLICIES as REMAT_POLICIES
from gradir.passes.report import human_bytes, value_name
from gradir.passes.schedule import POLICIES
from gradir.util.outfolder import OutputFolder, check_writable
from gradir.util.pytree import tree_flatten, tree_map
from gradir.viz import memory_timeline, write_report

# rich_markup_mode=None: click's help, where a flag reads `--viz / --no-viz` (rich's shows `<bool>`, as if it took
# a value) and every help text wraps as whole sentences
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="gradir: trace, differentiate and inspect Python functions as SSA graphs.")

MODULE_NAME = "model"
DEFAULT_FUNCTIONS = ("loss", "model")
EXIT_FAILED = 1  # the command ran and found a problem (a failed gradient check)


# -- loading a model file ---------------------------------------------------------------------------


def _line_in(exc: BaseException, path: Path) -> int | None:
    """The innermost line of `path` in `exc`'s traceback (where the user's code failed)."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() == path.resolve():
            line = frame.lineno
    return line


def load_model(path: str) -> ModuleType:
    """Import the Python file at `path` as module "model" (its folder goes on sys.path, as for a script)."""
    p = Path(path)
    if not p.exists():
        raise CLIError(f"{path}: no such file")
    if not p.is_file():
        raise CLIError(f"{path}: not a file")
    loader = importlib.machinery.SourceFileLoader(MODULE_NAME, str(p))  # any extension, not only .py
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(MODULE_NAME, loader))
    folder = str(p.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    sys.modules[MODULE_NAME] = module  # dataclasses and pickling look their module up here
    try:
        loader.exec_module(module)
    except SyntaxError as e:
        raise CLIError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - any failure of the user's file is reported in one line
        line = _line_in(e, p)
        where = f"{path}:{line}" if line else path
        raise CLIError(f"{where}: {type(e).__name__} while importing the model file: {e}") from None
    return module


def _defined_functions(module: ModuleType) -> list[str]:
    return [name for name, obj in vars(module).items()
            if inspect.isfunction(obj) and obj.__module__ == module.__name__ and not name.startswith("_")
            and name != "example_inputs"]


def _has_annotations(fn) -> bool:
    try:
        params = inspect.signature(fn, eval_str=True).parameters.values()
    except Exception:  # noqa: BLE001 - an unreadable signature simply does not qualify
        return False
    return any(isinstance(p.annotation, (TensorSpec, SpecDType)) for p in params)


def pick_function(module: ModuleType, name: str | None, path: str):
    """`--fn NAME`, else `loss`, else `model`, else the one function with example inputs."""
    defined = _defined_functions(module)
    listing = ", ".join(defined) or "none"
    if name is not None:
        fn = getattr(module, name, None)
        if not callable(fn):
            raise CLIError(f"{path}: no function {name!r} (functions defined there: {listing})")
        return fn
    for default in DEFAULT_FUNCTIONS:
        if callable(getattr(module, default, None)):
            return getattr(module, default)
    candidates = defined if hasattr(module, "example_inputs") else [n for n in defined
                                                                     if _has_annotations(getattr(module, n))]
    if len(candidates) == 1:
        return getattr(module, candidates[0])
    if not candidates:
        raise CLIError(f"{path}: no function to trace (functions defined there: {listing}); name one `loss`, "
                       f"pick one with --fn, and {CONVENTION}")
    raise CLIError(f"{path}: several functions could be traced ({', '.join(candidates)}); pick one with --fn")


def _parse_argnums(text: str | None, fn, nargs: int, path: str) -> tuple[int, ...] | None:
    """`--argnums 0,2` or `--argnums w1,b1` (parameter names)."""
    if text is None:
        return None
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    out = []
    for item in (s.strip() for s in text.split(",") if s.strip()):
        if item.lstrip("-").isdigit():
            n = int(item)
        elif item in params:
            n = params.index(item)
        else:
            raise CLIError(f"{path}: --argnums {item!r} is neither a position nor a parameter of {fn.__name__} "
                           f"({', '.join(params)})")
        if not -nargs <= n < nargs:
            raise CLIError(f"{path}: --argnums {n} is out of range for {nargs} arguments of {fn.__name__}")
        out.append(n % nargs)
    return tuple(out)


@dataclass
class Target:
    """A model-file function, its example arguments and the positional arguments to differentiate."""

    path: str
    module: ModuleType
    fn: Any
    args: tuple
    argnums: tuple[int, ...]
    origin: str


def load_target(path: str, fn_name: str | None, argnums: str | None) -> Target:
    """Load the file, pick the function, build its example inputs and argnums (CLIError on any problem)."""
    module = load_model(path)
    if fn_name in (None, "model"):
        target = _torch_target(path, module, argnums)
        if target is not None:
            return target
    fn = pick_function(module, fn_name, path)
    try:
        ex = resolve_example(fn, module)
    except ModelFileError as e:
        raise CLIError(f"{path}: {e}") from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - example_inputs() is user code
        line = _line_in(e, Path(path))
        where = f"{path}:{line}" if line else path
        raise CLIError(f"{where}: {type(e).__name__} in example_inputs(): {e}") from None
    nums = _parse_argnums(argnums, fn, len(ex.args), path)
    if nums is None:
        nums = ex.argnums if ex.argnums is not None else default_argnums(ex.args)
    if not nums:
        raise CLIError(f"{path}: {fn.__name__} has no floating-point argument to differentiate; choose with --argnums")
    return Target(path, module, fn, ex.args, nums, ex.origin)


def _torch_target(path: str, module: ModuleType, argnums: str | None) -> Target | None:
    """A PyTorch model file (`model()` returns an nn.Module; gradir.cli.torch_models): the module and its loss
    captured with gr.from_torch, differentiated with respect to its parameters. None for other files."""
    try:
        with _user_code(path):
            net = torch_module(module)
    except TorchModelError as e:
        raise CLIError(f"{path}: {e}") from None
    if net is None:
        return None
    try:
        with _user_code(path):
            fn, params, inputs = loss_function(module, net)
    except TorchModelError as e:
        raise CLIError(f"{path}: {e}") from None
    args = (params, *inputs)
    nums = _parse_argnums(argnums, fn, len(args), path) or (0,)
    return Target(path, module, fn, args, nums, "model() and example_inputs()")


def _located(e: GradirError, path: str, fn) -> str:
    """`path:LINE: Kind: op: message`: the error's line when it is in the model file, else (no user line:
    the command line made the call) the line defining `fn`; other files stay in the message."""
    file, _, line = (e.source or "").rpartition(":")
    if file == Path(path).name and line.isdigit():
        return f"{path}:{line}: {type(e).__name__}: {e.op + ': ' if e.op else ''}{e.detail}"
    code = getattr(inspect.unwrap(fn), "__code__", None) if e.source is None and fn is not None else None
    where = f"{path}:{code.co_firstlineno}" if code is not None and Path(code.co_filename).name == Path(path).name else path
    return f"{where}: {type(e).__name__}: {e}"


@contextlib.contextmanager
def _user_code(path: str, fn=None):
    """Turn failures of the user's function `fn` into one-line CLIErrors; gradir's own bugs still raise."""
    try:
        yield
    except CLIError:
        raise
    except GradirError as e:
        raise CLIError(_located(e, path, fn)) from None
    except Exception as e:
        tb = e.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        line = _line_in(e, Path(path))
        if line is None or tb.tb_frame.f_globals.get("__name__", "").startswith("gradir"):
            raise
        raise CLIError(f"{path}:{line}: {type(e).__name__}: {e}") from None


# -- output -----------------------------------------------------------------------------------------


def _arg_names(fn, nargs: int) -> list[str]:
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"arg{i}" for i in range(nargs)]


def _type_of(x) -> str:
    leaves, _ = tree_flatten(x)
    if len(leaves) != 1:
        return f"pytree of {len(leaves)} arrays"
    a = np.asarray(leaves[0])
    dt = dtypes.weak_dtype(leaves[0], None) if isinstance(leaves[0], (bool, int, float, complex)) else a.dtype
    return f"{dtypes.short(dt)}[{','.join(map(str, a.shape))}]"


def _print_ir(console: Console, title: str, graph: Graph, full: bool, view: View | None = None,
              traced: Graph | None = None):
    """`graph`'s IR; with `traced` (and without --full), composite ops traced as one line fold back into one."""
    console.rule(title, style="cyan")
    text = graph.to_text(full=full)
    if traced is not None and not full:
        text = fold_composites(traced, graph, text)
    _out(console, view.listing(text) if view else text)


def _out(console: Console, text: str) -> None:
    """`text` verbatim (no markup, emoji or wrapping), straight to the console's file: rich's own
    rendering of a long text takes seconds."""
    console.file.write(text + "\n")


def _summary(console: Console, t: Target, j, view: View) -> None:
    saved = j.saved
    names = _arg_names(t.fn, len(t.args))
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("function", f"{t.fn.__name__} ({t.path}, example inputs from {t.origin})")
    table.add_row("arguments", ", ".join(f"{n}: {_type_of(a)}" for n, a in zip(names, t.args)))
    table.add_row("differentiated", ", ".join(names[i] for i in t.argnums))
    results = len(j.forward.outputs) - len(j.residuals)
    table.add_row("forward", f"{len(j.forward.nodes)} nodes, {len(j.forward.outputs)} outputs "
                             f"({results} result{'s' * (results != 1)} + {len(j.residuals)} saved)")
    table.add_row("backward", f"{len(j.backward.nodes)} nodes, {len(j.backward.outputs)} gradients")
    inputs = sum(1 for e in saved.entries if e.kind == "input")
    table.add_row("saved for backward", f"{saved.count} values: {inputs} inputs (no new memory) + "
                                        f"{saved.count - inputs} computed, {human_bytes(saved.bytes, exact=True)} new memory "
                                        f"({human_bytes(saved.total_bytes, exact=True)} read by backward)")
    console.rule("summary", style="cyan")
    console.print(table, markup=False, highlight=False)
    _out(console, view.report(saved, title=False))  # the summary's line is its title


def _plan_summary(console: Console, j, remat=None) -> None:
    """One paragraph each for the backward schedule and the memory plan (full: `gradir schedule`/`memory`),
    and one line for the recompute plan if one was asked for."""
    s, m = j.schedule, j.memory
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    shown = 16
    order = " ".join(value_name(n, j.backward) for n in s.order[:shown]) + (" ..." if len(s.order) > shown else "")
    table.add_row("schedule", f"{s.policy} policy: backward steps 0 to {len(s.steps) - 1} run {order}; at most "
                              f"{max((st.queue_size for st in s.steps), default=0)} nodes wait in the ready queue")
    if s.note:
        table.add_row("", s.note)
    where = f" at {m.describe_step(m.peak_step)}" if m.order else ""
    peak, bound, arena = (human_bytes(b, exact=True) for b in (m.peak_bytes, m.lower_bound_bytes, m.arena_bytes))
    table.add_row("memory", f"peak {peak}{where}, the program's results included; lower bound {bound}; arena {arena} "
                            f"({m.fragmentation:.1%} fragmentation)")
    if remat is not None:
        table.add_row("recompute", remat.summary(j.remat))
    console.rule("backward schedule and memory plan", style="cyan")
    console.print(table, markup=False, highlight=False)


def _console() -> Console:
    """Terminal output; piped output gets room for the wide report tables."""
    return Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)


def _fail(e: CLIError):
    typer.echo(f"gradir: error: {e}", err=True)
    raise typer.Exit(e.code)


# -- commands -----------------------------------------------------------------------------------------


def _version(value: bool):
    if value:
        typer.echo(f"gradir {version('gradir')}")
        raise typer.Exit()


@app.callback()
def main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False):
    """gradir: trace, differentiate and inspect Python functions as SSA graphs."""


FILE_HELP = "Python model file (entry function plus example_inputs() or gr.f32[...] annotations)."
FN_HELP = "Function to trace (default: loss, then model, then the only function in the file)."
POLICY_HELP = "Backward scheduling policy: engine (most recent forward op first) or memory (free the most bytes first)."
ARGNUMS_HELP = "Arguments to differentiate: positions or parameter names, comma-separated (default: all float ones)."
REMAT_HELP = (f"Recompute plan: {', '.join(REMAT_POLICIES)} (default: none; optimal when --budget is given, "
              "uniform when --segments is).")
BUDGET_HELP = ("Activation memory budget for --remat optimal: bytes or a size such as 4MiB, 512KiB, 1.5GB "
               "(KB/MB/GB are powers of 1000, KiB/MiB/GiB of 1024), rounded to whole bytes.")
PLOT_HELP = ("Also write the memory timeline of forward then backward (svg, png or pdf by the extension), with "
             "each --buckets bucket's launch step marked.")
BUCKETS_HELP = ("Plan data-parallel gradient buckets of at most this size (bytes or 1MiB, 25MB, ...): gradients "
                "grouped in the order the schedule makes them final, as DDP's bucket_cap_mb.")
SEGMENTS_HELP = ("Segments for --remat uniform, 1 to the model's number of blocks (default: the square root of "
                 "the number of blocks).")
FORMAT_HELP = f"{', '.join(FORMATS)}: a text table, the report's to_dict(), or one CSV line per row."
FULL_HELP = "Print every row (a terminal shows the first and last ones, and the rows that matter)."
LIMIT_HELP = "Print at most N rows of each report table (and N lines of each IR listing)."
OUTPUT_HELP = "Write to this file (atomically) instead of the terminal, every row; its folder must exist."
VIZ_HELP = ("Also write diagrams (.dot, and .svg via Graphviz's dot), the memory plot and an HTML report into "
            "--out (default gradir_out/).")
OUT_HELP = "Folder for the IR text files and --viz's files, created if missing and checked before any work."
# the options every report command takes (`gradir schedule`, `saved`, `memory`)
Format = Annotated[str, typer.Option("--format", help=FORMAT_HELP)]
Output = Annotated[Path | None, typer.Option("--output", "-o", help=OUTPUT_HELP)]
Full = Annotated[bool, typer.Option("--full", help=FULL_HELP)]
Limit = Annotated[int | None, typer.Option("--limit", help=LIMIT_HELP, min=1)]
Viz = Annotated[bool, typer.Option("--viz/--no-viz", help=VIZ_HELP)]
Out = Annotated[Path | None, typer.Option("--out", help=OUT_HELP)]


@app.command(short_help="Print the forward and backward IR of a model file's function, and what backward keeps.")
def trace(file: Annotated[str, typer.Argument(help=FILE_HELP, metavar="FILE")],
          fn: Annotated[str | None, typer.Option("--fn", help=FN_HELP)] = None,
          argnums: Annotated[str | None, typer.Option("--argnums", help=ARGNUMS_HELP)] = None,
          policy: Annotated[str, typer.Option("--policy", help=POLICY_HELP)] = "engine",
          out: Out = None,
          viz: Viz = False,
          full: Annotated[bool, typer.Option("--full", help="Print everything: every IR line and report row (a terminal "
                                                       "shows the first and last ones), large constants in full "
                                                       "(so the IR parses back).")] = False,
          limit: Limit = None,
          fmt: Annotated[str, typer.Option("--format", help="table (text) or json (IR text and every report's "
                                                           "to_dict()).")] = "table",
          output: Output = None,
          remat: Annotated[str | None, typer.Option("--remat", help=REMAT_HELP)] = None,
          budget: Annotated[str | None, typer.Option("--budget", help=BUDGET_HELP)] = None,
          segments: Annotated[int | None, typer.Option("--segments", help=SEGMENTS_HELP)] = None,
          passes: Annotated[bool, typer.Option("--passes/--no-passes", help="Also print the graph after every pass, from the "
                                                             "trace through autodiff and each cleanup pass.")] = False,
          backend: Annotated[str | None, typer.Option("--backend", help="Also print the fused kernels a compiled backend "
                                                      "runs (llvm): each kernel's loop nest, nodes and bytes.")] = None):
    """Trace FILE's function, differentiate it, and print the forward and backward IR
    (partitioned under the recompute plan --remat chooses, if any)."""
    folder = None  # the output folder, once checked
    try:
        error = check_format(fmt, ("table", "json"))
        if fmt == "csv":
            error += "; a CSV holds one table: gradir saved, schedule or memory --format csv"
        if error:
            raise CLIError(error)
        plan = Remat.from_options(remat, budget, segments)
        check_backend(backend)
        check_output_file(output, "--output")
        folder = _output_folder(out, viz)  # before the work: an unwritable --out fails at once
        t = load_target(file, fn, argnums)
        j = _trace_grad(t, file, policy, plan)
    except CLIError as e:
        _fail(e)
    except KeyboardInterrupt:
        _interrupted(folder)
    if fmt == "json":
        data = {"function": t.fn.__name__, "forward": j.forward.to_text(full=True),
                "backward": j.backward.to_text(full=True), "saved": j.saved.to_dict(),
                "schedule": j.schedule.to_dict(), "memory": j.memory.to_dict()}
        if plan is not None:
            data["remat"] = j.remat.to_dict()
        _emit(as_json(data), output)
    else:
        view = View.of(full, limit, to_file=output is not None)
        console = _console() if output is None else Console(file=io.StringIO(), width=100, color_system=None)
        _print_trace(console, t, j, plan, view, full, passes, backend)
        if output is not None:
            _emit(console.file.getvalue(), output)
    _write_outputs(_console(), j, t, folder, ir=out is not None, viz=viz)


VIZ_DIR = "gradir_out"


def _print_trace(console: Console, t: Target, j, plan, view: View, full: bool, passes: bool, backend: str | None):
    """What `gradir trace` prints: the IR after each pass (--passes), forward and backward IR, the summary
    with the saved-tensor table, the schedule and memory paragraph, and the kernels (--backend)."""
    if passes:
        for name, graph in autodiff_pipeline(j.graph, list(j.wrt)):
            _print_ir(console, f"after {name}: {len(graph.nodes)} nodes", graph, full, view)
    _print_ir(console, f"forward: {t.fn.__name__}'s inputs -> result + values saved for backward", j.forward, full,
              view, j.graph)
    _print_ir(console, "backward: saved values + cotangent -> gradients", j.backward, full, view)
    _summary(console, t, j, view)
    _plan_summary(console, j, plan)
    if backend is not None:
        _print_kernels(console, j, backend)


def _emit(text: str, output: Path | None) -> None:
    """Print `text`, or write it atomically to `output` and say so."""
    try:
        path = emit(text, output, lambda x: typer.echo(x, nl=not x.endswith("\n")))
    except OSError as e:
        _fail(CLIError(f"cannot write {output}: {e.strerror or e}"))
    if path is not None:
        typer.echo(f"wrote {path}")


def _print_kernels(console: Console, j, backend: str) -> None:
    """The fused kernel listings of the forward and backward programs, as the compiled backend builds them."""
    if backend != "llvm":
        _fail(CLIError(f"unknown --backend {backend!r} (kernel listings exist for: llvm)"))
    for part, program in j.kernels.items():
        console.rule(f"{part} kernels ({backend})", style="cyan")
        console.print(str(program), markup=False, highlight=False)


def _output_folder(out: Path | None, viz: bool) -> Path | None:
    """The folder `trace` writes into (--out, or VIZ_DIR for --viz alone), created and proved
    writable before any work; None when nothing is to be written."""
    if out is None and not viz:
        return None
    folder = out or Path(VIZ_DIR)
    try:
        return check_writable(folder)
    except OSError as e:
        raise CLIError(f"cannot write into {folder}: {e.strerror or e}") from None


def _write_outputs(console: Console, j, t: Target, folder: Path | None, ir: bool, viz: bool) -> None:
    """The IR files (--out) and the diagrams and report (--viz), through one OutputFolder: they
    replace the previous run's files of this function there, and NAME.manifest.json lists them."""
    if folder is None:
        return
    name = t.fn.__name__
    files = OutputFolder(folder, name, {"command": "gradir trace", "model": t.path, "function": name})
    try:
        if ir:
            for part, graph in (("forward", j.forward), ("backward", j.backward)):
                path = files.write(f"{name}.{part}.ir", graph.to_text(full=True) + "\n")
                console.print(f"wrote {path}", markup=False, highlight=False)
        if viz:
            _render(console, j, files)
        files.finish()
    except KeyboardInterrupt:
        files.finish("interrupted")
        _interrupted(folder, files)
    except OSError as e:
        _fail(CLIError(f"cannot write into {folder}: {e.strerror or e}"))


def _interrupted(folder: Path | None, files: OutputFolder | None = None):
    """Ctrl-C: say what was and was not written, exit 130. `folder` is None when the run stopped before its
    output folder was checked (or it has none)."""
    if files is None or not files.written:
        where = f" into {folder} (an earlier run's files there are untouched)" if folder is not None else ""
        typer.echo(f"gradir: interrupted; nothing was written{where}", err=True)
    else:
        missing = files.missing()
        left = f"; not written: {', '.join(missing[:6])}" + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        typer.echo(f"gradir: interrupted; wrote {len(files.written)} files into {folder} (listed in "
                   f"{files.manifest.name}, marked interrupted){left if missing else ''}", err=True)
    raise typer.Exit(130)


def _render(console: Console, j, files: OutputFolder) -> None:
    """Diagrams, memory plot and HTML report, with a progress bar; print what was written."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console,
                  transient=True) as bar:
        task = bar.add_task("drawing", total=1)

        def progress(description: str, done: int, total: int):
            bar.update(task, description=description, completed=done, total=total)
        written = write_report(j, files.folder, files.name, progress=progress, files=files)
    console.rule("diagrams and report", style="cyan")
    for what, p in [*written.items(), ("manifest", files.manifest)]:
        console.print(f"{what:>20}  {p}", markup=False, highlight=False)
    for note in written.notes:
        typer.echo(f"gradir: note: {note}", err=True)


def _trace_grad(t: Target, file: str, policy: str, remat: Remat | None = None):
    if policy not in POLICIES:
        raise CLIError(f"unknown --policy {policy!r} (have: {', '.join(POLICIES)})")
    with _user_code(file, t.fn):
        if remat is None:
            return trace_grad(t.fn, *t.args, argnums=t.argnums, policy=policy)
        j = trace_grad(t.fn, *t.args, argnums=t.argnums, policy=policy, **remat.keywords())
        blocks = j.remat.to_dict()["blocks"]  # plan and measure here: a planning failure is reported like any other
    check_segments(remat, blocks, t.fn.__name__)  # before any output: a plan would silently cut fewer
    return j


def _report_command(file, fn, argnums, policy, fmt, what: str, remat: Remat | None = None, full: bool = False,
                    limit: int | None = None, output: Path | None = None, buckets: int | None = None,
                    out: Path | None = None, viz: bool = False, plot: Path | None = None):
    """Print (or write to `output`) the report `what` of FILE's function: a table, JSON or CSV; with
    `buckets` (bytes), the data-parallel bucket plan after it; then the IR files (--out) and diagrams (--viz).
    Every option and output path is checked before the work."""
    error = check_format(fmt)
    folder = None  # the output folder, once checked: a Ctrl-C before then has written nothing anywhere
    try:
        if error:
            raise CLIError(error)
        check_output_file(output, "--output")
        check_output_file(plot, "--plot", PLOT_SUFFIXES)
        folder = _output_folder(out, viz)
        t = load_target(file, fn, argnums)
        j = _trace_grad(t, file, policy, remat)
        report = getattr(j, what)
    except CLIError as e:
        _fail(e)
    except KeyboardInterrupt:
        _interrupted(folder)
    extra = {"remat": j.remat} if remat is not None else {"buckets": j.buckets(buckets)} if buckets else {}
    if fmt == "json":
        data = report.to_dict() if not extra else {what: report.to_dict(), **{k: r.to_dict() for k, r in extra.items()}}
        if remat is not None:
            data["budget_bytes"] = remat.budget
        _emit(as_json(data), output)
    elif fmt == "csv":
        _emit(report.to_csv(), output)  # the recompute plan is one row: its report is in the json and table forms
    else:
        view = View.of(full, limit, to_file=output is not None)
        text = view.report(report)
        for r in extra.values():
            text += "\n\n" + view.report(r)
        _emit(text, output)
    _write_outputs(_console(), j, t, folder, ir=out is not None, viz=viz)
    return j



def _report_cli(what: str, short: str, doc: str) -> None:
    """Register `gradir WHAT`, a command printing the trace's report `what` (schedule, saved)."""
    def command(file: Annotated[str, typer.Argument(help=FILE_HELP, metavar="FILE")],
                fn: Annotated[str | None, typer.Option("--fn", help=FN_HELP)] = None,
                argnums: Annotated[str | None, typer.Option("--argnums", help=ARGNUMS_HELP)] = None,
                policy: Annotated[str, typer.Option("--policy", help=POLICY_HELP)] = "engine",
                fmt: Format = "table", output: Output = None, full: Full = False, limit: Limit = None,
                viz: Viz = False, out: Out = None):
        _report_command(file, fn, argnums, policy, fmt, what, full=full, limit=limit, output=output, out=out, viz=viz)
    command.__doc__ = doc
    app.command(name=what, short_help=short)(command)


@app.command(short_help="Print the backward schedule step by step, and the data-parallel buckets (--buckets).")
def schedule(file: Annotated[str, typer.Argument(help=FILE_HELP, metavar="FILE")],
             fn: Annotated[str | None, typer.Option("--fn", help=FN_HELP)] = None,
             argnums: Annotated[str | None, typer.Option("--argnums", help=ARGNUMS_HELP)] = None,
             policy: Annotated[str, typer.Option("--policy", help=POLICY_HELP)] = "engine",
             buckets: Annotated[str | None, typer.Option("--buckets", help=BUCKETS_HELP)] = None,
             plot: Annotated[Path | None, typer.Option("--plot", help=PLOT_HELP)] = None,
             fmt: Format = "table", output: Output = None, full: Full = False, limit: Limit = None,
             viz: Viz = False, out: Out = None):
    """The backward pass's dependency-counted schedule, step by step: node run, counts decremented, ready
    queue after, bytes freed. With --buckets SIZE, then the data-parallel gradient buckets: which gradients
    share an all-reduce and the step each bucket can launch at."""
    try:
        size = parse_size(buckets, "--buckets") if buckets is not None else None
    except CLIError as e:
        _fail(e)
    j = _report_command(file, fn, argnums, policy, fmt, "schedule", full=full, limit=limit, output=output,
                        buckets=size, out=out, viz=viz, plot=plot)
    if plot is not None:
        try:
            written = memory_timeline({policy: j.memory}, plot, buckets=j.buckets(size) if size else None)
        except (GradirError, OSError) as e:
            _fail(CLIError(f"cannot write the plot {plot}: {e}"))
        typer.echo(f"wrote {written}", err=True)


_report_cli("saved", "Print every value forward keeps for backward: its bytes, maker, reason and last use.",
            "The saved-tensor report: every value forward keeps for backward, its bytes, who made it, "
                     "which rule needs it and why, its backward readers and last use.")


@app.command(short_help="Print the memory plan of forward then backward, under a recompute plan (--remat).")
def memory(file: Annotated[str, typer.Argument(help=FILE_HELP, metavar="FILE")],
           fn: Annotated[str | None, typer.Option("--fn", help=FN_HELP)] = None,
           argnums: Annotated[str | None, typer.Option("--argnums", help=ARGNUMS_HELP)] = None,
           policy: Annotated[str, typer.Option("--policy", help=POLICY_HELP)] = "engine",
           fmt: Format = "table",
           remat: Annotated[str | None, typer.Option("--remat", help=REMAT_HELP)] = None,
           budget: Annotated[str | None, typer.Option("--budget", help=BUDGET_HELP)] = None,
           segments: Annotated[int | None, typer.Option("--segments", help=SEGMENTS_HELP)] = None,
           output: Output = None, full: Full = False, limit: Limit = None, viz: Viz = False, out: Out = None):
    """The memory plan of forward then backward: live bytes per step, peak, lower bound, arena.
    With --remat/--budget, under a recompute plan, followed by the plan's report (json: {"memory", "remat"})."""
    try:
        plan = Remat.from_options(remat, budget, segments)
    except CLIError as e:
        _fail(e)
    _report_command(file, fn, argnums, policy, fmt, "memory", plan, full=full, limit=limit, output=output, out=out,
                    viz=viz)


def _as_float64(x):
    if isinstance(x, float):
        return x
    a = np.asarray(x)
    return a.astype(np.float64) if dtypes.is_float(a.dtype) else x


CHECK_EVERY_UP_TO = 2_000  # coordinates `gradir check` takes one by one (two runs of the model each)
DIRECTIONS = 16


@app.command(short_help="Check a model file's gradients against central differences, in float64.")
def check(file: Annotated[str, typer.Argument(help=FILE_HELP, metavar="FILE")],
          fn: Annotated[str | None, typer.Option("--fn", help=FN_HELP)] = None,
          argnums: Annotated[str | None, typer.Option("--argnums", help=ARGNUMS_HELP)] = None,
          forward_mode: Annotated[bool, typer.Option("--fwd/--no-fwd", help="Also check forward mode (one jvp per "
                                                     "coordinate).")] = False,
          every: Annotated[bool, typer.Option("--all", help=f"Check every coordinate even above {CHECK_EVERY_UP_TO:,} "
                                              f"(by default bigger models are checked along {DIRECTIONS} random directions).")]
          = False, viz: Viz = False, out: Out = None):
    """Check FILE's gradients against central differences, in float64: coordinate by coordinate, or along
    random directions when there are more coordinates than can be checked one by one in reasonable time.
    With --viz, then the diagrams and report of the traced gradient (as gradir trace --viz)."""
    try:
        folder = _output_folder(out, viz)
        t = load_target(file, fn, argnums)
        args = tuple(tree_map(_as_float64, a) for a in t.args)  # float32 differences are too coarse to judge
        count = sum(np.size(x) for i in t.argnums for x in tree_flatten(t.args[i])[0])
        sampled = count > CHECK_EVERY_UP_TO and not every and not forward_mode
        if bad := nonfinite_inputs(t.fn, args, nan_only=True):  # NaN inputs, not the gradient, are at fault
            raise CLIError(f"{file}: {bad}")
        with _user_code(file, t.fn):
            try:
                if sampled:
                    _check_directions(t.fn, args, t.argnums)
                else:
                    checks.gradcheck(t.fn, *args, argnums=t.argnums, modes=("rev", "fwd") if forward_mode else ("rev",))
            except checks.GradcheckError as e:
                low = np.asarray(t.fn(*args)).dtype  # every coordinate "fails" where differences drown in rounding
                if dtypes.is_float(low) and np.finfo(low).eps > np.finfo(np.float64).eps:
                    raise CLIError(f"{file}: {t.fn.__name__} returns {low} even given float64 arguments (a cast "
                                   "inside it?): central differences at that precision cannot judge a gradient") from None
                if bad := nonfinite_inputs(t.fn, args):  # an inf input (a NaN one never gets here)
                    raise CLIError(f"{file}: {bad}") from None
                raise CLIError(f"{file}: gradcheck failed: {e}", EXIT_FAILED) from None
    except CLIError as e:
        _fail(e)
    names = ", ".join(_arg_names(t.fn, len(t.args))[i] for i in t.argnums)
    how = (f"along {DIRECTIONS} random directions each (--all checks coordinate by coordinate)" if sampled
           else "coordinate by coordinate")
    typer.echo(f"gradcheck passed: {t.fn.__name__}, {count:,} coordinates of {names} agree with central differences "
               f"{how} (float64)")
    _check_outputs(t, file, folder, out, viz)


def _check_outputs(t: Target, file: str, folder: Path | None, out: Path | None, viz: bool) -> None:
    """`gradir check --out/--viz`: the traced gradient's IR files and diagrams, as `gradir trace` writes them."""
    if folder is None:
        return
    try:
        j = _trace_grad(t, file, "engine")
    except CLIError as e:
        _fail(e)
    _write_outputs(_console(), j, t, folder, ir=out is not None, viz=viz)


def _check_directions(fn, args, argnums) -> None:
    """checks.directional along DIRECTIONS random unit directions per argument, judged with gradcheck's
    tolerances (GradcheckError naming the worst direction)."""
    for i in argnums:
        report = checks.directional(fn, *args, argnum=i, n=DIRECTIONS, seed=0)
        worst = max(report, key=lambda r: r.error / (1e-8 + 1e-6 * abs(r.analytic)))
        if worst.error > 1e-8 + 1e-6 * abs(worst.analytic):
            raise checks.GradcheckError(
                f"argument {i}, direction {worst.index}: g.v = {worst.analytic:.10g} but central differences give "
                f"{worst.numeric:.10g} (error {worst.error:.3g})")


if __name__ == "__main__":
    app()
