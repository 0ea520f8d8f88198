"""The folder a run writes its files into: checked before the work, one run's files never mixed
with the previous run's, and a manifest saying what was written.

A run named NAME (the traced function) writes `NAME.*` files and lists them in
`NAME.manifest.json`, with whether the run finished ("complete", "interrupted", or "writing" while
it runs). The first file a run writes first removes the files the previous run of that name listed
in its manifest (those only: nothing else in the folder is touched), so the folder never holds one
model's region diagrams next to another model's report. Runs of other names keep their files.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from gradir.util.fileio import write_atomic

MANIFEST_SUFFIX = ".manifest.json"


def check_writable(folder: str | os.PathLike) -> Path:
    """Create `folder` (and its parents) and prove a file can be written there; OSError if not."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(20, "not a directory", str(folder))
    folder.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(dir=folder, prefix=".gradir-probe.", suffix=".tmp")
    os.close(fd)
    os.unlink(probe)
    return folder


def check_file_writable(path: str | os.PathLike) -> Path:
    """Prove a file can be written at `path` without creating anything: its folder exists and takes a probe
    file (created and removed), and `path` is not a folder. OSError if not, its strerror a phrase for a
    message ("its folder out does not exist") and its filename the path at fault."""
    path = Path(path)
    folder = path.parent
    if not folder.exists():
        raise FileNotFoundError(2, f"its folder {folder} does not exist (create it first)", str(folder))
    if not folder.is_dir():
        raise NotADirectoryError(20, f"{folder} is a file, not a folder", str(folder))
    if path.is_dir():
        raise IsADirectoryError(21, "it is a folder, not a file", str(path))
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".gradir-probe.", suffix=".tmp")
    except OSError as e:
        raise type(e)(e.errno, f"{e.strerror or e} (in {folder})", str(folder)) from None
    os.close(fd)
    os.unlink(probe)
    return path


class OutputFolder:
    """The files one run named `name` writes into `folder`, recorded in `name.manifest.json`.
    `about` (the model file, the function...) is stored in the manifest too."""

    def __init__(self, folder: str | os.PathLike, name: str, about: dict | None = None):
        self.folder, self.name, self.about = Path(folder), name, dict(about or {})
        self.written: list[Path] = []
        self.expected: list[str] = []  # file names the run means to write (for an interrupted run's summary)
        self.removed: list[str] = []   # the previous run's files this run removed
        self.status = "writing"
        self._cleared = False

    @property
    def manifest(self) -> Path:
        return self.folder / f"{self.name}{MANIFEST_SUFFIX}"

    def previous(self) -> list[str]:
        """The file names the previous run of this name listed (only plain `NAME.*` names inside
        the folder are trusted)."""
        try:
            listed = json.loads(self.manifest.read_text()).get("files", [])
        except (OSError, ValueError, AttributeError):
            return []
        return [n for n in listed if isinstance(n, str) and Path(n).name == n and n.startswith(f"{self.name}.")
                and not n.endswith(MANIFEST_SUFFIX)]

    def write(self, filename: str, data: str | bytes) -> Path:
        """Write `folder/filename` atomically and record it (the first write clears the previous run's files)."""
        if not self._cleared:
            self._clear_previous()
        path = write_atomic(self.folder / filename, data)
        if path not in self.written:
            self.written.append(path)
        self._save()
        return path

    def expect(self, filenames) -> None:
        self.expected.extend(n for n in filenames if n not in self.expected)

    def missing(self) -> list[str]:
        """Expected files not written (yet)."""
        done = {p.name for p in self.written}
        return [n for n in self.expected if n not in done]

    def finish(self, status: str = "complete") -> None:
        """Record how the run ended ("complete" or "interrupted"), if it wrote anything."""
        self.status = status
        if self.written:
            self._save()

    def _clear_previous(self) -> None:
        self._cleared = True
        for n in self.previous():
            with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
                (self.folder / n).unlink()
                self.removed.append(n)

    def _save(self) -> None:
        record = {"name": self.name, "status": self.status, **self.about, "files": [p.name for p in self.written]}
        write_atomic(self.manifest, json.dumps(record, indent=1) + "\n")
