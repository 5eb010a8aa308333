"""Consensus clustering: fuse several base clusterings of the same items into one.

``FUSERS`` maps a fuser's name to its class. Every class follows scikit-learn's conventions:
``Fuser(n_clusters=K, random_state=seed).fit(labels).labels_`` with ``labels`` an
(n_items, n_clusterings) integer array, -1 = missing.
"""

from adseg.consensus._base import (
    BaseFuser,
    assign_labels,
    check_labels,
    co_association,
    count_label_groups,
    incidence_matrix,
    relabel,
    top_eigenvectors,
)

FUSERS: dict[str, type[BaseFuser]] = {}

# Each fuser module registers itself here (one line each, in the order users see them).
# --- fuser registrations (begin) ---
from adseg.consensus.l2 import L2CC  # noqa: E402
from adseg.consensus.rcc import RCC  # noqa: E402

FUSERS["rcc"] = RCC
FUSERS["l2"] = L2CC
from adseg.consensus.sccbg import SCCBG  # noqa: E402

FUSERS["sccbg"] = FUSERS["spcc"] = SCCBG
from adseg.consensus.trce import TRCE  # noqa: E402

FUSERS["trce"] = TRCE
from adseg.consensus.rcec import RCEC  # noqa: E402

FUSERS["rcec"] = RCEC
from adseg.consensus.lta import LTA  # noqa: E402

FUSERS["lta"] = LTA
# --- fuser registrations (end) ---


def canonical_name(name: str) -> str:
    """The name a registered fuser is stored and reported under: the first registered for its
    class (``canonical_name("spcc") == "sccbg"``), so that one fuser never has two keys."""
    cls = FUSERS[name]
    return next(key for key, other in FUSERS.items() if other is cls)


def describe_registered() -> str:
    """The registered names for a message: "l2, lta, rcc, rcec, sccbg (alias spcc), trce"."""
    aliases: dict[str, list[str]] = {}
    for name in FUSERS:
        aliases.setdefault(canonical_name(name), []).append(name)
    return ", ".join(
        key + (f" (alias {', '.join(rest)})" if (rest := names[1:]) else "")
        for key, names in sorted(aliases.items())
    )


__all__ = [
    "FUSERS",
    "BaseFuser",
    "assign_labels",
    "canonical_name",
    "check_labels",
    "describe_registered",
    "co_association",
    "count_label_groups",
    "incidence_matrix",
    "relabel",
    "top_eigenvectors",
]
