"""Base clusterings of advertisers from each view: KS graphs of the bid landscapes, and text.

Pipeline steps 3–4 (DESIGN.md §2; paper seed 003, Eqs. 40–42):

* **KS views** ("win_rate", "ecpm_cost"): for each α the graph S_ij = 1[dist_ij ≤ C_α] of the
  scaled KS distances is segmented by normalised cut, one base clustering per α. Advertisers with
  fewer than ``min_samples`` samples get label -1. The number of clusters is ``n_clusters`` or, by
  default, the Bethe-Hessian estimate clipped to ``k_range`` ("eigengap", "modularity" optional).
* **Text view**: TF-IDF, LSA and row-normalisation, then seeded k-means for each k in ``text_ks``;
  descriptions with no usable term get -1.

Memory per KS view (n_v advertisers with enough samples), below ncut.SPARSE_MIN_N = 5,000: two
n_v × n_v float64 arrays plus the cut's peak, up to 3 more at n_v ≤ 2,000 and about 1.1 above.
From 5,000 on (the sparse path): no n_v × n_v array; row blocks of the KS distances (≈ 2.2 × 64
MiB) and about 16 + 3 × 12 bytes per linked pair (the pairs, the α graphs in CSR), then the cut's
CSR copies. Time: the KS distances plus, per α, the Bethe-Hessian count (dense LDLᵀ, O(n_v³/3);
Lanczos on the sparse path), a partial eigendecomposition and k-means.
Choice of k against the paper, and measurements: docs/algorithms/ks.md.

Modules: ``base`` (ViewConfig, BaseClusterings), ``ncut`` (NormalizedCutClustering and its rules
for the number of clusters), ``ks`` (KS graphs and views), ``text``, ``build`` (all views of a
run, and the paper's Tables 4–5).
"""

from adseg.views.base import KS_VIEWS, BaseClusterings, ViewConfig
from adseg.views.build import build_base_clusterings, clusters_per_view, view_consistency
from adseg.views.ks import ks_graph, ks_view
from adseg.views.ncut import NormalizedCutClustering
from adseg.views.text import text_view

__all__ = [
    "KS_VIEWS",
    "BaseClusterings",
    "NormalizedCutClustering",
    "ViewConfig",
    "build_base_clusterings",
    "clusters_per_view",
    "ks_graph",
    "ks_view",
    "text_view",
    "view_consistency",
]
