"""adseg: advertiser segmentation by consensus clustering, and delivery forecasting."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("adseg")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
