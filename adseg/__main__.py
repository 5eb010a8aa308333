"""``python -m adseg``: the same command line as the ``adseg`` entry point."""

from adseg.entry import main

main()
