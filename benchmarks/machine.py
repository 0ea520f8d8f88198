"""The machine a benchmark runs on: CPU model, OpenBLAS kernels and PyTorch's BLAS, versions, and how busy other
processes keep the cores (bench_backends.py's and bench_gpu.py's report heads)."""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import math
import os
import pathlib
import platform
import time

from roofline import torch_blas

OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def _version(module: str) -> str | None:
    if importlib.util.find_spec(module) is None:
        return None
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return "?"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def openblas_kernels() -> list[str]:
    """Which kernel each loaded OpenBLAS uses: threadpoolctl's answer if installed, else asked
    directly from the libraries this process has loaded (NumPy's and SciPy's)."""
    import numpy.linalg  # noqa: F401 - loads NumPy's OpenBLAS
    with contextlib.suppress(ImportError):
        import scipy.linalg  # noqa: F401
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        threadpool_info = None
    if threadpool_info is not None:
        return [f"{pathlib.Path(i['filepath']).name}: {i.get('architecture')} ({i.get('num_threads')} threads, "
                f"threadpoolctl)" for i in threadpool_info() if i.get("internal_api") == "openblas"]
    out = []
    with contextlib.suppress(OSError):
        libs = sorted({ln.split()[-1] for ln in open("/proc/self/maps") if "openblas" in ln.lower() and "/" in ln})
        for lib in libs:
            with contextlib.suppress(OSError):
                dll = ctypes.CDLL(lib)
                for sym in ("openblas_get_corename", "scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
                            "openblas_get_corename64_"):
                    fn = getattr(dll, sym, None)
                    if fn is not None:
                        fn.restype = ctypes.c_char_p
                        out.append(f"{pathlib.Path(lib).name}: {fn().decode()}")
                        break
    return out


def _cpu_jiffies() -> tuple[int, int]:
    """(all CPU time, idle + iowait time) since boot, in clock ticks, from /proc/stat."""
    fields = [int(v) for v in pathlib.Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields[:8]), fields[3] + fields[4]  # user nice system idle iowait irq softirq steal


class OtherLoad:
    """How many cores other processes kept busy between start() and cores(): the machine's busy
    CPU time (/proc/stat) minus this process's own (threads included), over the wall time."""

    def start(self) -> OtherLoad:
        self.t, self.own = time.perf_counter(), sum(os.times()[:4])
        try:
            self.jiffies = _cpu_jiffies()
        except (OSError, ValueError, IndexError):
            self.jiffies = None
        return self

    def cores(self) -> float:
        if self.jiffies is None:
            return math.nan
        (t0, i0), (t1, i1) = self.jiffies, _cpu_jiffies()
        busy = ((t1 - t0) - (i1 - i0)) / os.sysconf("SC_CLK_TCK")
        own = sum(os.times()[:4]) - self.own
        return max(0.0, busy - own) / max(time.perf_counter() - self.t, 1e-9)


def _busy_cores(seconds: float = 0.5) -> float:
    """Cores other processes keep busy, sampled while this process sleeps."""
    meter = OtherLoad().start()
    time.sleep(seconds)
    return meter.cores()


BUSY_WARNING = ("**Warning: other processes were using the CPUs; multi-threaded systems (OpenBLAS, PyTorch, "
                "XLA thread pools) slow down many-fold when another process holds a core, so these numbers are "
                "not representative.**")


def environment_line() -> str:
    env = ", ".join(f"{k}={os.environ[k]}" for k in OPENBLAS_VARS if k in os.environ) or "OPENBLAS_CORETYPE unset"
    kernels = openblas_kernels()
    busy = _busy_cores()
    warn = " " + BUSY_WARNING if busy > 0.3 else ""
    try:
        from gradir.backends.llvm.gemm import describe
        products = f"gradir LLVM's products: {describe()}; "
    except ImportError:
        products = ""
    return (f"Environment: {env}; {products}OpenBLAS kernel: {'; '.join(kernels) if kernels else 'unknown'}; "
            f"PyTorch's BLAS: {torch_blas()}; cores busy with other processes at the start: {busy:.1f}.{warn}")


MODULES = (("NumPy", "numpy"), ("PyTorch", "torch"), ("JAX", "jax"), ("jaxlib", "jaxlib"), ("llvmlite", "llvmlite"),
           ("gradir", "gradir"))  # (name, module) whose versions a header reports, when installed


def versions(modules=MODULES) -> str:
    out = [f"Python {platform.python_version()}"]
    for name, mod in modules:
        v = _version(mod)
        if v is not None:
            out.append(f"{name} {v}")
    return ", ".join(out)


def cpu_description() -> str:
    threads = ""
    with contextlib.suppress(ImportError):
        import torch

        threads = f", PyTorch {torch.get_num_threads()} threads"
    return f"{_cpu_model()}, {os.cpu_count()} CPU cores ({platform.platform()}{threads})"
