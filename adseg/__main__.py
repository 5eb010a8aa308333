"""``python -m adseg``: the same command line as the ``adseg`` entry point."""

from adseg.cli import app

app(prog_name="adseg")
