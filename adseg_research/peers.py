"""py-cluster-ensemble's (PCE) TRCE, ECPCS-MC, LWEA and U-SENC as fuser-like objects (issue 39).

PCE 1.0.0 (github.com/HeWenjun824699/py-cluster-ensemble, commit 8228a50; not on PyPI) is a
reference only: its code is never copied into adseg, nor installed. Its four cores import only
numpy and scipy, so they are loaded from a source checkout's ``src`` folder: empty stub packages
``pce``, ``pce.consensus`` and ``pce.consensus.methods`` get a ``__path__`` into the checkout, so
PCE's own ``__init__`` files (which import torch) never run.

Each core is called with the arguments PCE's entry-point wrappers
(src/pce/consensus/{trce,ecpcs_mc,lwea,usenc}.py) pass at their defaults, after
``np.random.seed(random_state)`` as the wrappers seed the global generator:
``trce_core(L, c, 0.01)``, ``ecpcs_mc_core(L, 20, c)``, ``lwea_core(L, c, 10)``,
``usenc_core(L, c)``.

    load_pce(src) -> {"trce": fn, "ecpcs_mc": fn, "lwea": fn, "usenc": fn}
    PCEFuser("trce", n_clusters=c, random_state=s, src=src).fit_predict(L (n, m)) -> (n,)
    pce_factories(src) -> {"PCE TRCE": factory(c, s), "ECPCS-MC": …, "LWEA": …, "U-SENC": …}
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np

__all__ = [
    "PCE_COLUMNS",
    "PCE_COMMIT",
    "PCE_ENV",
    "PCE_VERSION",
    "PCEFuser",
    "load_pce",
    "pce_factories",
]

PCE_VERSION = "1.0.0"
PCE_COMMIT = "8228a50"
PCE_ENV = "ADSEG_PCE_SRC"
"""The environment variable naming PCE's ``src`` folder (``adseg bench consensus --peers-src``)."""
PCE_COLUMNS: dict[str, str] = {
    "PCE TRCE": "trce",
    "ECPCS-MC": "ecpcs_mc",
    "LWEA": "lwea",
    "U-SENC": "usenc",
}
"""Table column → PCE core (``pce/consensus/methods/<core>_core.py``)."""

_STUBS = ("pce", "pce.consensus", "pce.consensus.methods")
_LOADED: dict[Path, dict[str, Callable]] = {}


def _core_file(src: Path, core: str) -> Path:
    return src / "pce" / "consensus" / "methods" / f"{core}_core.py"


def load_pce(src: str | Path) -> dict[str, Callable]:
    """Import the four cores from PCE's ``src`` folder (the one holding ``pce/``), without running
    PCE's package ``__init__`` files. Cached per folder; loading another folder replaces the stub
    packages (and the ``pce.*`` modules imported from the first).

    FileNotFoundError when ``src`` is not a folder; ValueError naming the file missing when it is
    not a PCE source tree; an exception raised while importing a core propagates. Returns
    core name → function."""
    src = Path(src).expanduser()
    if not src.is_dir():
        raise FileNotFoundError(f"PCE source folder {src} not found (need the src/ of a checkout)")
    key = src.resolve()
    if key in _LOADED:
        return _LOADED[key]
    for core in PCE_COLUMNS.values():
        if not _core_file(src, core).is_file():
            raise ValueError(
                f"{src} is not PCE's source folder: no pce/consensus/methods/{core}_core.py "
                "there (need the src/ of a py-cluster-ensemble checkout)"
            )
    for name in [m for m in sys.modules if m == "pce" or m.startswith("pce.")]:
        del sys.modules[name]  # another folder's modules, or PCE itself when installed
    root = key / "pce"
    for name, path in zip(
        _STUBS, (root, root / "consensus", root / "consensus" / "methods"), strict=True
    ):
        module = types.ModuleType(name)
        module.__path__ = [str(path)]
        sys.modules[name] = module
    _LOADED.clear()  # the modules of a folder loaded before are gone from sys.modules
    cores = {}
    for core in PCE_COLUMNS.values():
        module = importlib.import_module(f"pce.consensus.methods.{core}_core")
        cores[core] = getattr(module, f"{core}_core")
    _LOADED[key] = cores
    return cores


class PCEFuser:
    """One PCE method behind adseg's fuser interface.

    Parameters
    ----------
    method : "trce", "ecpcs_mc", "lwea" or "usenc" (a value of :data:`PCE_COLUMNS`).
    n_clusters : c, passed to the core.
    random_state : int, the global numpy seed set before the call (as PCE's wrappers do).
    src : PCE's ``src`` folder (:func:`load_pce`).

    ``fit_predict(labels)`` takes the base clusterings (n, m) int and returns the core's labels
    (n,); ``labels_`` keeps them. PCE TRCE returns its learned graph's connected components
    unrepaired, so its cluster count can differ from c. Cost: the core's (PCE TRCE builds an
    n × n × m float64 tensor: 2,900 items × 40 clusterings is 2.7 GB).
    """

    def __init__(
        self, method: str, n_clusters: int, random_state: int = 0, *, src: str | Path
    ) -> None:
        if method not in PCE_COLUMNS.values():
            raise ValueError(f"unknown PCE method {method!r}; choose from {list(PCE_COLUMNS)}")
        self.method = method
        self.n_clusters = int(n_clusters)
        self.random_state = int(random_state)
        self.src = src

    def fit(self, labels: np.ndarray) -> PCEFuser:
        """Fuse ``labels`` (n, m); the result is ``labels_`` (n,)."""
        self.fit_predict(labels)
        return self

    def fit_predict(self, labels: np.ndarray) -> np.ndarray:
        """Fuse ``labels`` (n, m) int → (n,) labels (ValueError for another shape, in or out)."""
        core = load_pce(self.src)[self.method]
        L = np.array(labels, copy=True)  # a core may write into its input
        if L.ndim != 2:
            raise ValueError(f"labels must be 2-D (n, m); got shape {L.shape}")
        c = self.n_clusters
        np.random.seed(self.random_state)  # noqa: NPY002 — PCE's wrappers seed it, as here
        if self.method == "trce":
            out = core(L, c, 0.01)  # the wrapper's default gamma (the paper's λ)
        elif self.method == "ecpcs_mc":
            out = core(L, 20, c)  # the wrapper's default t = 20
        elif self.method == "lwea":
            out = core(L, c, 10)  # the wrapper's default theta = 10 (the core's own: 0.4)
        else:
            out = core(L, c)
        out = np.asarray(out).ravel()
        if out.shape != (L.shape[0],):
            raise ValueError(f"PCE {self.method} returned shape {out.shape}, not ({L.shape[0]},)")
        self.labels_ = out
        return out


def pce_factories(src: str | Path) -> dict[str, Callable[[int, int], PCEFuser]]:
    """Table column → factory(n_clusters, seed) of :class:`PCEFuser`, after loading ``src``
    (:func:`load_pce`, so a bad folder fails here, before any fit)."""
    load_pce(src)
    return {
        column: (lambda k, s, core=core: PCEFuser(core, k, s, src=src))
        for column, core in PCE_COLUMNS.items()
    }
