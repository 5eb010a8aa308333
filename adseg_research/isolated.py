"""One call in a forked child process: its wall seconds, its peak memory, a timeout, its failure.

The child resets its peak resident set (VmHWM) to its current resident set through
``/proc/self/clear_refs`` (Linux ≥ 4.0), runs the call and reports the peak above the resident
set before the call: the memory the call itself held at its peak (numpy, LAPACK/ARPACK work
arrays and the Python heap alike), not the interpreter's. An exception, a crash or a timeout is a
result with its text, never a raised error. Where there is no fork (not Linux/macOS) the call runs
in this process and the peak is NaN.

    run_isolated(fn, timeout=None) -> {"status": "ok" | "error", "result", "seconds",
                                       "peak_mib", "rss_mib", "error"}
"""

from __future__ import annotations

import multiprocessing as mp
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["proc_kib", "run_isolated"]


def proc_kib(field: str, path: str = "/proc/self/status") -> float:
    """A kB field of a /proc file (VmRSS, VmHWM of /proc/self/status; MemTotal of
    /proc/meminfo) as a float; NaN where the file or the field is missing (not Linux)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1])
    except OSError:
        pass
    return float("nan")


def _failure_text(exc: BaseException) -> str:
    """``Type: message [at file.py:line]`` (the innermost frame)."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    tb = traceback.extract_tb(exc.__traceback__)
    return text + (f" [at {Path(tb[-1].filename).name}:{tb[-1].lineno}]" if tb else "")


def _measured(fn: Callable[[], Any]) -> tuple:
    """Run ``fn`` here: (status, result, seconds, peak MiB above the start, peak RSS MiB, text)."""
    try:
        try:  # reset the peak-RSS mark to the current RSS
            Path("/proc/self/clear_refs").write_text("5")
            reset = True
        except OSError:
            reset = False
        rss0 = proc_kib("VmRSS")
        t0 = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - t0
        hwm = proc_kib("VmHWM")
        peak = (hwm - rss0) / 1024 if reset else float("nan")
        return ("ok", result, seconds, peak, hwm / 1024, "")
    except Exception as exc:  # noqa: BLE001 — the text is the result
        nan = float("nan")
        return ("error", None, nan, nan, nan, _failure_text(exc))


def _row(*values) -> dict[str, Any]:
    return dict(
        zip(("status", "result", "seconds", "peak_mib", "rss_mib", "error"), values, strict=True)
    )


def _child(conn, fn: Callable[[], Any]) -> None:
    try:
        conn.send(_measured(fn))
    finally:
        conn.close()


def run_isolated(fn: Callable[[], Any], timeout: float | None = None) -> dict[str, Any]:
    """Run ``fn()`` in a forked child (nothing is pickled but its result).

    Returns a dict: status "ok" or "error"; result (``fn``'s return value, None on error);
    seconds (wall clock of the call, or the time waited on a timeout or crash); peak_mib (peak
    resident MiB during the call above the child's resident MiB before it; NaN where unmeasured);
    rss_mib (the child's peak resident MiB); error ("" when ok; the exception's text, "timeout
    after N s", or the child's exit code when it died). Cost: one fork (copy-on-write) per call.
    """
    try:
        ctx = mp.get_context("fork")
    except ValueError:  # no fork on this platform: run here, memory unmeasured
        status, result, seconds, _, _, error = _measured(fn)
        nan = float("nan")
        return _row(status, result, seconds, nan, nan, error)
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn), daemon=True)
    t0 = time.perf_counter()
    proc.start()
    child.close()
    msg = None
    if parent.poll(timeout):
        try:
            msg = parent.recv()
        except EOFError:
            msg = None
    proc.join(5 if msg is not None else 0.1)
    if proc.is_alive():
        proc.kill()
        proc.join()
    parent.close()
    if msg is None:
        waited = time.perf_counter() - t0
        timed_out = timeout is not None and waited >= timeout
        text = (
            f"timeout after {timeout:.0f} s"
            if timed_out
            else f"child died, exit code {proc.exitcode} (killed for memory?)"
        )
        nan = float("nan")
        return _row("error", None, waited, nan, nan, text)
    return _row(*msg)
