"""All base clusterings of a run (build_base_clusterings), and the paper's Tables 4 and 5
from them (clusters_per_view, view_consistency)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from sklearn.utils import check_random_state

from adseg.metrics import pair_consistency
from adseg.views.base import KS_VIEWS, BaseClusterings, ViewConfig, empty_columns
from adseg.views.ks import ks_view
from adseg.views.text import text_view

__all__ = ["build_base_clusterings", "clusters_per_view", "view_consistency"]


def build_base_clusterings(
    win_samples: Sequence,
    cost_samples: Sequence,
    descriptions: Sequence[str | None],
    config: ViewConfig | None = None,
    random_state=None,
    run_parts=None,
    block_parts=None,
) -> BaseClusterings:
    """All base clusterings the consensus step fuses (pipeline steps 3–4).

    win_samples, cost_samples : n 1-D arrays each (market prices; paid eCPMs on won auctions),
        advertiser i at position i in both and in ``descriptions`` (n strings).
    Returns BaseClusterings: labels (n, V) int64 (-1 = left out), columns in the order win_rate
    per α, ecpm_cost per α, text per k (a view with too few usable advertisers contributes no
    columns, with a warning). Deterministic for a given random_state.
    run_parts : how the three views are computed: a callable given [(name, function,
        arguments)] that returns the functions' results in order (the nightly passes the
        execution engine's, ``adseg.app.execution.part_runner``: the views in parallel, the
        same results); None runs them here, one after the other.
    block_parts : how a KS view's blocks and cuts are computed, from within its part (see
        ``adseg.views.ks.ks_view``; the nightly's engine: ``execution.NestedParts``).
    """
    tasks = view_parts(win_samples, cost_samples, descriptions, config, random_state, block_parts)
    if run_parts is None:
        parts = [function(*args) for _, function, args in tasks]
    else:
        parts = run_parts(tasks)
    labels = np.concatenate([p.labels for p in parts], axis=1)
    frames = [p.columns for p in parts if len(p.columns)]
    columns = pd.concat(frames, ignore_index=True) if frames else empty_columns()
    distances = {k: v for p in parts for k, v in p.distances.items()}
    return BaseClusterings(labels, columns, distances)


def view_parts(
    win_samples: Sequence,
    cost_samples: Sequence,
    descriptions: Sequence[str | None],
    config: ViewConfig | None = None,
    random_state=None,
    block_parts=None,
) -> list[tuple]:
    """The three views of :func:`build_base_clusterings` as (name, function, arguments), the
    largest first: what its ``run_parts`` is given (a caller may start them early);
    ``block_parts``: the KS views' ``run_parts`` (see :func:`build_base_clusterings`)."""
    config = config or ViewConfig()
    n = len(win_samples)
    if len(cost_samples) != n or len(descriptions) != n:
        raise ValueError(
            "win_samples, cost_samples and descriptions must describe the same advertisers;"
            f" got lengths {n}, {len(cost_samples)} and {len(descriptions)}."
        )
    rng = check_random_state(random_state)
    seeds = rng.randint(0, 2**31 - 1, size=3)
    threads = config.blas_threads
    return [
        (
            "win_rate",
            _limited,
            (threads, ks_view, win_samples, "win_rate", config, int(seeds[0]), block_parts),
        ),
        (
            "ecpm_cost",
            _limited,
            (threads, ks_view, cost_samples, "ecpm_cost", config, int(seeds[1]), block_parts),
        ),
        ("text", _limited, (threads, text_view, descriptions, config, int(seeds[2]))),
    ]


def _limited(blas_threads: int | None, function, *args):
    """function(*args) with at most ``blas_threads`` BLAS/OpenMP threads (None: as they are)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=blas_threads):
        return function(*args)


def clusters_per_view(base: BaseClusterings) -> pd.DataFrame:
    """The paper's Table 4: clusters of each KS view at each α.

    One row per KS view present (view, then one column "alpha=<α>" per α with its n_clusters,
    then n_excluded). Paper, 1,268 advertisers: win_rate 65 / 47 / 32, ecpm_cost 73 / 51 / 40 at
    α = 0.01 / 0.05 / 0.1.
    """
    cols = base.columns
    ks = cols[cols["view"].isin(KS_VIEWS)] if len(cols) else cols
    if ks.empty:
        return pd.DataFrame(columns=["view", "n_excluded"])
    wide = ks.pivot(index="view", columns="parameter", values="n_clusters")
    order = [f"alpha={a:g}" for a in sorted(ks["alpha"].unique())]
    wide = wide[order].astype("Int64")
    wide["n_excluded"] = ks.groupby("view")["n_excluded"].max()
    wide = wide.reindex([v for v in KS_VIEWS if v in wide.index])
    return wide.reset_index().rename_axis(columns=None)


def view_consistency(base: BaseClusterings) -> pd.DataFrame:
    """The paper's Table 5: at each α, the share of advertiser pairs on which the win-rate and the
    eCPM-cost clusterings agree (both together or both apart; TPN) and disagree (FPN), over the
    advertisers labelled in both (adseg.metrics.pair_consistency, from the contingency table).

    Columns: alpha, view_a, view_b, agree, disagree, n_items. Paper: 74.21% / 25.79%.
    """
    cols = base.columns
    rows = []
    if len(cols):
        for alpha in sorted(cols.loc[cols["view"].isin(KS_VIEWS), "alpha"].unique()):
            param = f"alpha={alpha:g}"
            try:
                a = base.column("win_rate", param)
                b = base.column("ecpm_cost", param)
            except KeyError:
                continue
            agree, disagree = pair_consistency(a, b)
            rows.append(
                {
                    "alpha": float(alpha),
                    "view_a": "win_rate",
                    "view_b": "ecpm_cost",
                    "agree": agree,
                    "disagree": disagree,
                    "n_items": int(((a != -1) & (b != -1)).sum()),
                }
            )
    return pd.DataFrame(rows, columns=["alpha", "view_a", "view_b", "agree", "disagree", "n_items"])
