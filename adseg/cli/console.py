"""The two consoles every command prints through: ``out`` (results) and ``err`` (errors, warnings,
progress)."""

from __future__ import annotations

import sys

from rich.console import Console

# tables stay readable when piped to a file or a job log (rich assumes 80 columns there)
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 132)
err = Console(stderr=True, highlight=False, soft_wrap=True)
