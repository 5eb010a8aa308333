"""The SQL store: models, engine/session, migrations, reads that return frames, writes of results.

This package is the only place that knows SQL; the numerical core never imports it.
"""
