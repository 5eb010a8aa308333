"""Research code beside the product package ``adseg``: the papers' benchmark protocols (``bench``,
``bench_table2``), the loaders of the shared benchmark data (``datasets``) and k-means
base-clustering pools (``ensemble``). It may import ``adseg``; ``adseg`` imports it only inside
``adseg bench consensus`` (an import-linter contract in pyproject.toml)."""
