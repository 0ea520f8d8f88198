"""Compile LLVM IR text to machine code in this process (llvmlite MCJIT), and find functions in it.

Everything the LLVM backend executes goes through `JitModule`: IR text in, optimized (-O3, loop and SLP
vectorization on) machine code for the host CPU out, function addresses back. The optimized module can be
emitted as object code and loaded again later (`JitModule.from_object`), which is what an on-disk cache
keyed by `cpu_key()` stores. `blas_address` finds SciPy's BLAS routines so jitted code can call them.

Threads: split kernels run on pool.py's workers and partition the matrix products, calling BLAS once per
thread, so while gradir runs, SciPy's OpenBLAS must not start threads of its own (two pools on the same cores
fight): `BLAS_SERIAL` holds it at one thread for as long as any compiled program is running.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import os
import threading

import llvmlite.binding as llvm
import threadpoolctl

__all__ = ["BLAS_SERIAL", "JitModule", "add_symbol", "blas_address", "cpu_key", "default_threads", "optimize",
           "target_machine"]


def _new_target_machine() -> llvm.TargetMachine:
    # Every execution engine takes ownership of (and frees) the target machine it is created with, so each
    # engine gets a fresh one; all of them are configured identically to the shared one below.
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        opt=3,
        reloc="default",
        codemodel="jitdefault",
        jit=True,
    )


@functools.cache
def _init_native() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@functools.cache
def target_machine() -> llvm.TargetMachine:
    """The target machine for this host CPU (name and features), -O3, set up for in-process MCJIT; made once."""
    _init_native()
    return _new_target_machine()


@functools.cache
def cpu_key() -> str:
    """The host CPU name and feature string: part of the key of anything cached on disk as machine code."""
    return f"{llvm.get_host_cpu_name()}:{llvm.get_host_cpu_features().flatten()}"


def optimize(module_ref: llvm.ModuleRef) -> None:
    """Run LLVM's -O3 pipeline (inlining, loop unrolling, loop and SLP vectorization) on `module_ref` in place.

    The module is first given the host's triple and data layout, so that the optimizer's cost model (vector
    widths, alignments) is the host CPU's."""
    tm = target_machine()
    module_ref.triple = tm.triple
    module_ref.data_layout = str(tm.target_data)
    pto = llvm.PipelineTuningOptions(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pass_builder = llvm.create_pass_builder(tm, pto)
    pass_builder.getModulePassManager().run(module_ref, pass_builder)


def add_symbol(name: str, address: int) -> None:
    """Make the global symbol `name` resolve to `address` in every module jitted afterwards (e.g. a BLAS routine)."""
    llvm.add_symbol(name, address)


_PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_PyCapsule_GetName = ctypes.pythonapi.PyCapsule_GetName
_PyCapsule_GetName.restype = ctypes.c_char_p
_PyCapsule_GetName.argtypes = [ctypes.py_object]


def blas_address(name: str) -> int:
    """The address of SciPy's Fortran-ABI BLAS routine `name` ('sgemm', 'dgemm', 'sdot', 'ddot', ...).

    Fortran ABI: every argument is passed by pointer, matrices are column-major.
    """
    from scipy.linalg import cython_blas

    capsule = cython_blas.__pyx_capi__[name]
    return _PyCapsule_GetPointer(capsule, _PyCapsule_GetName(capsule))


def default_threads() -> int:
    """The threads a compiled program runs on: `GRADIR_NUM_THREADS`, else the cores this process may use."""
    env = os.environ.get("GRADIR_NUM_THREADS", "").strip()
    if env:
        return max(1, int(env))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class BlasSerial:
    """Holds the OpenBLAS libraries loaded here (SciPy's, which `blas_address` calls, and NumPy's) at one thread
    while compiled programs run: `enter()` before a run, `leave()` after; the first to enter saves their thread
    counts, the last to leave restores them."""

    def __init__(self):
        self._lock = threading.Lock()
        self._inside = 0
        self._saved: list[int] = []
        self._functions = None  # per library, its (get, set) functions

    @staticmethod
    def _find() -> list:
        blas_address("dgemm")  # (loads SciPy's BLAS, so that threadpoolctl sees it)
        found = []
        for lib in threadpoolctl.ThreadpoolController().lib_controllers:
            if lib.internal_api != "openblas":
                continue
            for prefix, suffix in itertools.product(("", "scipy_"), ("", "64_", "_64")):
                get = getattr(lib.dynlib, f"{prefix}openblas_get_num_threads{suffix}", None)
                put = getattr(lib.dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    get.restype, put.argtypes = ctypes.c_int, [ctypes.c_int]
                    found.append((get, put))
                    break
        return found

    def enter(self) -> None:
        with self._lock:
            if self._functions is None:
                self._functions = self._find()
            if self._inside == 0:
                self._saved = [get() for get, _ in self._functions]
                for (_, put), n in zip(self._functions, self._saved):
                    if n != 1:
                        put(1)
            self._inside += 1

    def leave(self) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0:
                for (_, put), n in zip(self._functions, self._saved):
                    if n != 1:
                        put(n)


BLAS_SERIAL = BlasSerial()


class JitModule:
    """One compiled module, owned by its own MCJIT execution engine (kept alive as long as this object)."""

    def __init__(self, engine: llvm.ExecutionEngine, module: llvm.ModuleRef | None, optimized_ir: str | None):
        self._engine = engine
        self._module = module
        self.optimized_ir = optimized_ir
        """The module's IR after optimization (None when loaded from object code)."""

    @classmethod
    def from_ir(cls, ir_text: str) -> JitModule:
        """Parse and verify `ir_text`, optimize it (`optimize`) and compile it to machine code."""
        _init_native()
        module = llvm.parse_assembly(str(ir_text))
        module.verify()
        optimize(module)
        engine = llvm.create_mcjit_compiler(module, _new_target_machine())
        engine.finalize_object()
        return cls(engine, module, str(module))

    @classmethod
    def from_object(cls, obj: bytes) -> JitModule:
        """Load object code emitted earlier by `object_code()` (same `cpu_key()`), without recompiling anything."""
        _init_native()
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _new_target_machine())
        engine.add_object_file(llvm.ObjectFileRef.from_data(bytes(obj)))
        engine.finalize_object()
        return cls(engine, None, None)

    def address(self, name: str) -> int:
        """The address of the compiled function `name` (wrap it with ctypes.CFUNCTYPE to call it)."""
        address = self._engine.get_function_address(name)
        if not address:
            raise KeyError(f"no function {name!r} in this jitted module")
        return address

    def _reparse(self) -> llvm.ModuleRef:
        # Code generation rewrites the IR it runs on, so emit from a fresh copy of the optimized IR rather than
        # from the module the execution engine owns and has already compiled.
        if self.optimized_ir is None:
            raise ValueError("this module was loaded from object code: it has no IR to emit")
        return llvm.parse_assembly(self.optimized_ir)

    def object_code(self) -> bytes:
        """The optimized module as relocatable object code for this host CPU (to cache on disk)."""
        return target_machine().emit_object(self._reparse())

    @property
    def assembly(self) -> str:
        """The optimized module as assembly text for this host CPU."""
        return target_machine().emit_assembly(self._reparse())
