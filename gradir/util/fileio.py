"""Writing output files atomically: a reader never sees half a file, a crash leaves none behind."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write `data` to `path` through a temporary file in the same folder, then rename it into place."""
    return write_atomic_with(path, lambda f: f.write(data), binary=isinstance(data, bytes))


def write_atomic_with(path: str | os.PathLike, write, binary: bool = True, durable: bool = False) -> Path:
    """`write(file)` into a temporary file in `path`'s folder, then rename it into place (the temporary
    file is removed if anything fails). `durable`: flushed to disk first, so a crash keeps the old file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path
