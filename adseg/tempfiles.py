"""A new temporary file beside a target, for write-then-rename (reports, sample marketplaces)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def create_beside(path: Path, mode: int = 0o666) -> tuple[int, Path]:
    """Create a new, empty file in ``path``'s folder, named ``.NAME.<random>.tmp``, and return
    (an open write descriptor, its path). O_EXCL: a file or symbolic link already there under
    that name is never opened or written through (a predictable name in a shared folder could
    be pre-planted as a link to another file), and two writers never share one. ``mode`` as
    for os.open (the umask applies): why not tempfile.mkstemp, which always creates 0600 — a
    new report must get the permissions any new file gets, and the umask cannot be read
    without setting it."""
    for _ in range(100):
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        except FileExistsError:
            continue
        return fd, temporary
    raise FileExistsError(f"no free temporary name beside {path}")
