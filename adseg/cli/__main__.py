"""``python -m adseg.cli``: the same command line as the ``adseg`` entry point."""

from adseg.entry import main

main()
