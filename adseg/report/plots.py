"""The HTML report's plots: per-segment c.d.f.s (the paper's Figure 1) and forecast-vs-actual
scatter plots, as matplotlib (Agg, no pyplot state) PNGs inlined as base64 ``data:`` URIs."""

from __future__ import annotations

import base64
import io
import math

from adseg.report.data import ReportData, _supply_modes


def _png(fig) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="plot" src="data:image/png;base64,{data}">'


def _cdf_plot_note(data: ReportData, source: str, max_segments: int) -> str:
    """What the c.d.f. plot shows, counting the segments the source has (a source with 5 segments
    shows 5, not "the 12 largest")."""
    n = data.segment_cdfs.loc[data.segment_cdfs["source"] == source, "segment"].nunique()
    if n == 0:
        return ""
    if n <= max_segments:
        which = "its segment" if n == 1 else f"all {n} of its segments"
    else:
        which = f"the {int(max_segments)} largest of its {n} segments"
    return f'<p class="note">Pooled c.d.f.s of {which} (the paper\'s Figure 1).</p>'


def _cdf_plot(data: ReportData, source: str, max_segments: int) -> str:
    from matplotlib.figure import Figure

    cdfs = data.segment_cdfs[data.segment_cdfs["source"] == source]
    if cdfs.empty:
        return "<p>No segment c.d.f.s for this source.</p>"
    sizes = data.segment_sizes[data.segment_sizes["source"] == source]
    if len(sizes):
        order = sizes.sort_values(["n_advertisers", "segment"], ascending=[False, True])
        top = order["segment"].head(max_segments).tolist()
        n_adv = dict(zip(sizes["segment"], sizes["n_advertisers"], strict=True))
    else:
        top = sorted(cdfs["segment"].unique())[:max_segments]
        n_adv = {}
    fig = Figure(figsize=(11, 4.2))
    axes = fig.subplots(1, 2)
    titles = {"win": "win rate (market-price c.d.f.)", "cost": "eCPM cost c.d.f."}
    colors = [f"C{i % 10}" for i in range(len(top))]
    for ax, kind in zip(axes, ("win", "cost"), strict=True):
        sub = cdfs[cdfs["kind"] == kind]
        for seg, color in zip(top, colors, strict=True):  # ≤ max_segments lines
            line = sub[sub["segment"] == seg]
            if line.empty:
                continue
            style = "-" if top.index(seg) < 10 else "--"
            label = f"segment {seg}" + (f" ({n_adv[seg]} adv.)" if seg in n_adv else "")
            ax.plot(line["bid"], line["cdf"], style, color=color, lw=1.4, label=label)
        ax.set_xlabel("eCPM bid")
        ax.set_ylabel("F(bid)")
        ax.set_title(titles[kind])
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    if axes[1].get_legend_handles_labels()[0]:  # matplotlib warns on an empty legend
        axes[1].legend(fontsize=7, loc="lower right")
    return _png(fig)


def _scatter_plot(data: ReportData, source: str) -> str:
    from matplotlib.figure import Figure

    f = data.forecasts
    f = f[f["source"] == source]
    modes = _supply_modes(data.mape)
    mode = "actual" if "actual" in modes or not modes else "forecast"
    f = f[f["supply_mode"] == mode]
    if f.empty:
        return "<p>No forecasts for this source.</p>"
    fig = Figure(figsize=(11, 4.6))
    axes = fig.subplots(1, 2)
    for ax, what in zip(axes, ("impressions", "spend"), strict=True):
        lo, hi = math.inf, -math.inf
        for meth, marker in (("segment", "o"), ("blended", "x")):
            g = f[f["method"] == meth]
            y, yhat = g[f"{what}_actual"].to_numpy(float), g[f"{what}_forecast"].to_numpy(float)
            ok = (y > 0) & (yhat > 0)
            if not ok.any():
                continue
            ax.scatter(y[ok], yhat[ok], s=9, alpha=0.5, marker=marker, label=meth)
            lo = min(lo, y[ok].min(), yhat[ok].min())
            hi = max(hi, y[ok].max(), yhat[ok].max())
        if math.isfinite(lo):
            ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="forecast = actual")
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel(f"actual {what}")
        ax.set_ylabel(f"forecast {what}")
        ax.set_title(f"{what}: forecast vs actual ({mode} supply)")
        ax.grid(alpha=0.3, which="both")
        if ax.get_legend_handles_labels()[0]:  # nothing plotted when every value is zero
            ax.legend(fontsize=8)
    return _png(fig)
