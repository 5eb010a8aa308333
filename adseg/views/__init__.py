"""Base clusterings of advertisers from each view: KS graphs of the bid landscapes, and text.

Pipeline steps 3–4 (DESIGN.md §2; paper seed 003, Eqs. 40–42). **KS views** ("win_rate",
"ecpm_cost"): per α, the graph S_ij = 1[dist_ij ≤ C_α] of the scaled KS distances is cut by
normalised cut (clusters: ``n_clusters`` or the Bethe-Hessian estimate in ``k_range``);
advertisers with fewer than ``min_samples`` samples get -1. **Text view**: TF-IDF, LSA, k-means
for each k in ``text_ks``; descriptions with no usable term get -1.

Memory per KS view (n_v advertisers): below 5,000 (ncut.SPARSE_MIN_N) two dense n_v × n_v float64
arrays plus the cut's peak; from 5,000 no n_v × n_v array, row blocks of ≈ 140 MiB and about 52
bytes per linked pair. Costs, the choice of k and measurements: docs/algorithms/ks.md.

Modules: ``base`` (ViewConfig, BaseClusterings), ``ncut`` (NormalizedCutClustering, its cluster
count rules), ``ks`` (KS graphs and views), ``text``, ``build`` (all views of a run, Tables 4–5).
"""

from adseg.views.base import KS_VIEWS, BaseClusterings, ViewConfig
from adseg.views.build import (
    build_base_clusterings,
    clusters_per_view,
    view_consistency,
    view_parts,
)
from adseg.views.ks import ks_graph, ks_view
from adseg.views.ncut import NormalizedCutClustering
from adseg.views.text import text_view

__all__ = [
    "KS_VIEWS",
    "BaseClusterings",
    "NormalizedCutClustering",
    "ViewConfig",
    "build_base_clusterings",
    "view_parts",
    "clusters_per_view",
    "ks_graph",
    "ks_view",
    "text_view",
    "view_consistency",
]
