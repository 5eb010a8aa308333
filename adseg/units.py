"""Money units shared by ingest, the store and the forecasts.

Prices are eCPM (currency per thousand impressions) and spend is currency; both are stored, and
summed where exactness matters, as integer micros (millionths of the currency unit), which are
exact on every database and in every sum below 2^53 micros (about 9 × 10^9 currency units).
"""

MICROS = 1_000_000
"""Micros per currency unit."""
