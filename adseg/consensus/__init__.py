"""Consensus clustering: fuse several base clusterings of the same items into one.

``FUSERS`` maps a fuser's name to its class. Every class follows scikit-learn's conventions:
``Fuser(n_clusters=K, random_state=seed).fit(labels).labels_`` with ``labels`` an
(n_items, n_clusterings) integer array, -1 = missing.
"""

import warnings
from collections.abc import Mapping

import numpy as np

from adseg.consensus._base import (
    BaseFuser,
    check_labels,
    co_association,
    count_label_groups,
    incidence_matrix,
    relabel,
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


# set by whoever calls a fuser for a run (the pipeline: the run's K and seed; ``weights``: one per
# base clustering, which the run's views decide), not by an option
_NOT_OPTIONS = ("n_clusters", "random_state", "weights")
# parameters that only count work (restarts, iterations): probed at most 10 (see ``_probe``)
_WORK_COUNTS = ("n_init", "max_iter", "max_sweeps", "min_iter", "repair_iters")
# 7 items in two groups, three clusterings that disagree on a few: every fuser fits it in < 0.2 s
_PROBE = np.array([[0, 0, 0], [0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 1, 1], [1, 1, 1], [1, 1, 0]])


def check_fuser_options(options: Mapping[str, Mapping[str, object]]) -> dict[str, dict]:
    """Fuser options ({fuser: {parameter: value}}, the nightly's ``--fuser-option``) checked
    before any work, keyed by canonical name (``spcc`` → ``sccbg``): each fuser registered, each
    parameter one of its constructor's but n_clusters, random_state and weights (see
    ``_NOT_OPTIONS``), and the values accepted by a fit on a tiny label matrix (the fusers
    check most values only in ``fit``). Raises ValueError naming the fuser and the parameter.
    Cost: one fit on 7 items per fuser named (< 0.2 s)."""
    checked: dict[str, dict] = {}
    for name, params in options.items():
        if name not in FUSERS:
            raise ValueError(f"unknown fuser {name!r}; registered: {describe_registered()}.")
        cls, key = FUSERS[name], canonical_name(name)
        allowed = sorted(set(cls().get_params()) - set(_NOT_OPTIONS))
        for param in params:
            if param not in allowed:
                why = " (the run sets it)" if param in _NOT_OPTIONS else ""
                raise ValueError(
                    f"{key} has no option {param!r}{why}; its options: {', '.join(allowed)}."
                )
        merged = checked.setdefault(key, {}) | dict(params)
        _probe(key, merged)
        checked[key] = merged
    return checked


def _probe(key: str, options: dict) -> None:
    """Fit fuser ``key`` with ``options`` on ``_PROBE`` (ValueError naming the options if it
    refuses them). Counts of work (``_WORK_COUNTS``) above 10 are probed at 10: a positive
    integer stays one, and rcc.n_init=10**8 must not take hours to be accepted."""
    probed = {
        p: min(v, 10) if p in _WORK_COUNTS and isinstance(v, int) and not isinstance(v, bool) else v
        for p, v in options.items()
    }
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a probe's convergence says nothing of a run's
            FUSERS[key](n_clusters=2, random_state=0, **probed).fit(_PROBE)
    except (ValueError, TypeError, OverflowError) as exc:
        named = ", ".join(f"{key}.{p}={v!r}" for p, v in options.items())
        raise ValueError(f"fuser option {named}: {exc}") from None


__all__ = [
    "FUSERS",
    "BaseFuser",
    "canonical_name",
    "check_fuser_options",
    "check_labels",
    "describe_registered",
    "co_association",
    "count_label_groups",
    "incidence_matrix",
    "relabel",
]
