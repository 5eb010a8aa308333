"""``python -m adseg``: the same command line as the ``adseg`` entry point."""

from adseg.cli import entry_point

entry_point()
