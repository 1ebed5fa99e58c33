"""A small file system of a test's own, which the test fills: how a full disk is made for real
(tmpfs, mounted as root; elsewhere the test is skipped, saying why)."""

from __future__ import annotations

import contextlib
import errno
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_filesystem(path: Path, megabytes: int) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs",
                              str(path)], capture_output=True, text=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"a small file system needs mount as root: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """A file that takes the disk's free space but ``leave`` bytes; remove it to free them.

    The processes under test write to the disk meanwhile, so a write may find it full first:
    that is the end of the filling, not a failure."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:
        try:
            while (free := shutil.disk_usage(disk).free) > leave:
                out.write(b"x" * min(4 * 1_048_576, free - leave))
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return filler
