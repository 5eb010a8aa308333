"""The use cases (DESIGN.md §4, the app layer): each runs :mod:`adseg.pipeline`'s stages on
the store's data and records what it did in a run row, under the nightly lock.

* :mod:`~adseg.app.nightly`: the nightly run; :mod:`~adseg.app.restage`: `views`, and
  `segment` / `forecast` again on a stored run; :mod:`~adseg.app.prune`: `db prune`.
* :mod:`~adseg.app.runs`: run bookkeeping (the lock, run rows, clean-up after errors and stops);
  :mod:`~adseg.app.inputs`: the windows, the checks before a run, the pull;
  :mod:`~adseg.app.reports`: a stored run's report data; :mod:`~adseg.app.execution`: the
  execution engine (a dask.distributed client) for the fuser fits.
The command line (adseg.cli) calls these; nothing here imports it.
"""
