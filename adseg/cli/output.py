"""Printing helpers shared by the commands, the checks of output paths, and the writes: atomic
files, /dev/stdout and /dev/fd/N, standard output without short writes."""

from __future__ import annotations

import functools
import math
import os
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path

from adseg.checks import on_read_only_mount
from adseg.cli.errors import CliError
from adseg.store.url import SQLITE_SIDE_FILES, database_url, sqlite_file


def show_progress(quiet: bool) -> bool:
    """Progress bars only for a person at a terminal."""
    return not quiet and sys.stderr.isatty()


def _counted(count: int, noun: str) -> str:
    """'1 run', '2 runs', '20,000 result rows'."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, with an ellipsis when something was cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _pct(x) -> str:
    """A share as a percentage; "n/a" when there is none (e.g. every actual was zero: NaN)."""
    try:
        value = float(x)
    except (TypeError, ValueError):
        return "n/a"
    return f"{100 * value:.2f}%" if math.isfinite(value) else "n/a"


def _check_outputs(
    paths: dict[str, Path | None],
    url_flag: str | None,
    inputs: dict[str, Path | None] | None = None,
) -> None:
    """``_check_output`` for each report path, and two rules across them: no report may be
    written over the SQLite database (or its journal files) or over an input file of the command
    (``inputs``, by option: ``--truth``) — a typo such as ``-o adseg.db`` for ``adseg.json``
    would replace every run and every ingested row with a report — and two reports may not
    share one file (the second would silently replace the first). Files are compared by name and
    by identity (device and inode), so a descriptor (/dev/fd/3) or a hard link that is the
    database is caught too."""
    taken: dict[str | tuple[int, int], str] = {}
    for option, path in (inputs or {}).items():
        if path is not None:
            taken[os.path.realpath(path)] = f"the {option} file"
            if (identity := _file_identity(path)) is not None:
                taken[identity] = f"the {option} file"
    database = sqlite_file(database_url(url_flag))
    if database is not None:
        real = os.path.realpath(database)
        for suffix in ("", *SQLITE_SIDE_FILES):
            what = f"the database {database}{suffix}"
            taken[real + suffix] = what
            if (identity := _file_identity(Path(real + suffix))) is not None:
                taken[identity] = what
    for option, path in paths.items():
        _check_output(path, option)
        if path is None:
            continue
        fd = _descriptor_of(path)
        real = os.path.realpath(path) if fd is None else f"file descriptor {fd}"
        identity = _file_identity(path)
        for key in (real, identity):
            if key is not None and key in taken:
                raise CliError(f"{option} {path} is {taken[key]}; give the report another name")
        taken[real] = f"also given to {option}"
        if identity is not None:
            taken[identity] = f"also given to {option}"


def _file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the regular file ``path`` names (an open descriptor's file for
    /dev/fd/N), or None when there is none: a missing file, a terminal, a pipe."""
    fd = _descriptor_of(path)
    try:
        st = os.fstat(fd) if fd is not None else os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def _check_output(path: Path | None, option: str) -> None:
    """At the door, before any work: an output path must name a file, one we may write when it
    exists (as a shell redirection would require), and the nearest existing folder on its way
    must be a folder we may write in (the missing ones are created)."""
    if path is None:
        return
    if path.is_dir():
        raise CliError(f"{option} {path} is a folder; give a file name (e.g. {path / 'report'})")
    if (fd := _descriptor_of(path)) is not None:
        if not _open_for_writing(fd):
            raise CliError(f"{option} {path}: file descriptor {fd} is not open for writing")
        return
    if path.exists() and not os.access(path, os.W_OK):  # a link: its target's permissions
        # the report is renamed over a regular file, which only its folder's permissions allow:
        # without this check a 0444 file, or another user's, would be silently replaced
        raise CliError(f"{option} {path}: no permission to write it")
    if path.exists() and not path.is_file():  # a FIFO, a device: written in place
        return
    parent = Path(os.path.realpath(path)).parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise CliError(f"{option} {path}: {parent} is a file, not a folder")
    if on_read_only_mount(parent):
        raise CliError(f"{option} {path}: {parent} is on a read-only file system")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CliError(f"{option} {path}: no permission to write in {parent}")


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path`` and rename it over ``path``, so a reader
    never sees half a file and a failure (disk full, no permission) leaves ``path`` as it was.
    A symbolic link is written through (its target is replaced, the link stays). /dev/stdout,
    /dev/stderr and /dev/fd/N are written to that open descriptor, at its offset, as a shell
    redirection would (reopening them would truncate a job log that stdout is appended to, and
    renaming over them would replace it); a FIFO or a device is written in place."""
    try:
        if (fd := _descriptor_of(path)) is not None:
            _write_descriptor(fd, text)
            return
        if path.exists() and not path.is_file():
            with open(path, "w", encoding="utf-8") as stream:
                stream.write(text)
            return
    except BrokenPipeError:
        raise  # the reader went away: a quiet 141, not an error naming a file
    except OSError as exc:  # /dev/full, a closed descriptor: name the path given
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    from adseg.tempfiles import create_beside

    given, path = path, Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    # a file rewritten keeps its permissions (a 0640 report stays 0640); its new text is never
    # readable by more users than the old file's while it is written
    mode = stat.S_IMODE(path.stat().st_mode) if path.is_file() else None
    tmp = None
    try:
        fd, tmp = create_beside(path, 0o666 if mode is None else 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            if mode is not None:
                os.fchmod(fd, mode)
            stream.write(text)
        tmp.replace(path)
    except OSError as exc:  # name the file the user gave, not the temporary one
        raise OSError(exc.errno, exc.strerror, str(given)) from exc
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


_STANDARD_STREAMS = {"/dev/stdout": 1, "/dev/stderr": 2}


def _descriptor_of(path: Path) -> int | None:
    """The already-open file descriptor that ``path`` names (/dev/stdout, /dev/stderr,
    /dev/fd/N, /proc/self/fd/N), or None for any other path."""
    text = os.path.normpath(os.path.abspath(path))
    if text in _STANDARD_STREAMS:
        return _STANDARD_STREAMS[text]
    match = re.fullmatch(r"/(?:dev/fd|proc/self/fd)/(\d+)", text)
    return int(match.group(1)) if match else None


def _open_for_writing(fd: int) -> bool:
    import fcntl

    try:
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:  # not open at all
        return False
    return mode in (os.O_WRONLY, os.O_RDWR)


def _write_descriptor(fd: int, text: str) -> None:
    """All of ``text`` (UTF-8) to ``fd`` after what Python has buffered for stdout and stderr."""
    sys.stdout.flush()
    sys.stderr.flush()
    _write_all(functools.partial(os.write, fd), text)


def _write_stdout(text: str) -> None:
    """All of ``text`` (UTF-8) to standard output. ``sys.stdout.write`` is not enough: with
    PYTHONUNBUFFERED=1 (common in containers) it sits on the raw file, whose short writes it
    drops, so a report piped to a reader that quits early (`| head`) lost its tail and exited 0
    instead of 141 — and a short write for any other reason would lose data silently."""
    sys.stdout.flush()
    binary = getattr(sys.stdout, "buffer", None)
    if binary is None:  # a text-only stream (an embedding application's)
        sys.stdout.write(text)
        return
    _write_all(binary.write, text)
    binary.flush()


def _write_all(write: Callable[[memoryview], int | None], text: str) -> None:
    """``text`` as UTF-8 through ``write`` (os.write, a raw or buffered file's write), repeated
    until every byte is taken: a short write is retried with the rest, never dropped."""
    data = memoryview(text.encode("utf-8"))
    while data:
        data = data[write(data) or 0 :]
