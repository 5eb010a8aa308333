"""Segment bid landscapes and delivery forecasts (pipeline steps: regenerate, forecast, score).

* :mod:`~adseg.forecast.ecdf` — pooled empirical c.d.f.s of many groups in one sorted array;
* :mod:`~adseg.forecast.blend` — the blended estimate w F_own + (1 − w) F_segment, w = n/(n+κ);
* :mod:`~adseg.forecast.kappa` — κ chosen by sample splitting on the training window;
* :mod:`~adseg.forecast.supply` — supply forecasts (SES, mean, seasonal naive);
* :mod:`~adseg.forecast.frames` — delivery frames checked;
* :mod:`~adseg.forecast.evaluate` — every source forecast and scored by MAPE.

Formulas, fallbacks and costs: docs/algorithms/forecasting.md. Nothing n × n is held.
"""

from adseg.forecast.blend import Landscape, expected_cost, shrinkage_weights
from adseg.forecast.ecdf import GroupedECDF, SampleSet, samples_by_advertiser
from adseg.forecast.evaluate import (
    ForecastResult,
    cdf_grid,
    evaluate_sources,
    reference_segmentations,
    score_forecasts,
    segment_cdf_table,
    segment_sizes,
)
from adseg.forecast.frames import DELIVERY_COLUMNS
from adseg.forecast.kappa import DEFAULT_KAPPA_GRID, KappaSelector, select_kappa
from adseg.forecast.supply import (
    FORECAST_CHOICES,
    SUPPLY_MODELS,
    fit_ses,
    forecast_supply,
    supply_for_rows,
)

__all__ = [
    "DEFAULT_KAPPA_GRID",
    "DELIVERY_COLUMNS",
    "FORECAST_CHOICES",
    "SUPPLY_MODELS",
    "ForecastResult",
    "GroupedECDF",
    "KappaSelector",
    "Landscape",
    "SampleSet",
    "cdf_grid",
    "evaluate_sources",
    "expected_cost",
    "fit_ses",
    "forecast_supply",
    "reference_segmentations",
    "samples_by_advertiser",
    "score_forecasts",
    "segment_cdf_table",
    "segment_sizes",
    "select_kappa",
    "shrinkage_weights",
    "supply_for_rows",
]
