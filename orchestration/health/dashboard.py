"""`<stream>_dashboard`: the stream's last hour as a matplotlib PNG, attached to the asset.

Input and processed rates, lag, p99 probe latency against the SLO, and channels, one panel each,
from the stream asset's observations, with a vertical marker at each rescale (a change of layout
epoch between two observations). The health schedule re-renders it every few minutes; the
stream asset's own numeric observations are what Dagster's Plots tab draws live.
"""

import base64
import time
from collections.abc import Sequence
from os import PathLike

from dagster import AssetExecutionContext, AssetsDefinition, Config, MaterializeResult, MetadataValue, asset
from pydantic import Field

from elasticity.state import uris
from orchestration.elasticity.policy import ElasticityPolicy, PolicyFileError, load_policy
from orchestration.health.samples import StreamSample, recent_samples, rescales
from orchestration.names import HEALTH_GROUP, dashboard_asset_key, stream_asset_key
from orchestration.plots import publish_png
from orchestration.resources import EspSettingsResource
from orchestration.streams.catalog import StreamEntry, stream_spec


class DashboardConfig(Config):
    """How much history the dashboard shows."""

    window_s: float = Field(3600.0, gt=0, description="Seconds of history drawn (default the last hour).")


def render_dashboard(samples: Sequence[StreamSample], slo_ms: float, title: str, path: str | PathLike[str]) -> bytes:
    """Four panels over time with rescale markers; writes the PNG to `path` and returns its bytes."""
    import matplotlib

    matplotlib.use("Agg")
    from datetime import datetime

    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    times = [datetime.fromtimestamp(s.at) for s in samples]
    fig, axes = plt.subplots(4, 1, figsize=(9, 8), sharex=True)
    rates, lag, latency, channels = axes
    rates.plot(times, [s.input_rps for s in samples], label="input")
    rates.plot(times, [s.processed_rps for s in samples], label="processed")
    rates.set_ylabel("records/s")
    rates.legend(loc="upper left")
    lag.plot(times, [s.lag_records for s in samples], color="tab:red")
    lag.set_ylabel("lag (records)")
    latency.plot(times, [s.p99_ms for s in samples], color="tab:purple", label="p99")
    latency.axhline(slo_ms, color="black", linestyle="--", linewidth=1, label=f"SLO {slo_ms:,.0f} ms")
    latency.set_ylabel("probe latency (ms)")
    latency.legend(loc="upper left")
    channels.step(times, [s.channels for s in samples], where="post", color="tab:green")
    channels.set_ylabel("channels")
    channels.yaxis.set_major_locator(MaxNLocator(integer=True))
    for change in rescales(samples):
        for ax in axes:
            ax.axvline(datetime.fromtimestamp(change.at), color="grey", linestyle=":", linewidth=1)
        channels.annotate(
            f"{change.channels_before}→{change.channels_after}",
            (datetime.fromtimestamp(change.at), change.channels_after),
            fontsize=8,
        )
    channels.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
    fig.suptitle(title if samples else f"{title}: no observations in the window")
    fig.tight_layout()
    png = publish_png(fig, path, dpi=80)
    plt.close(fig)
    return png


def make_dashboard_asset(entry: StreamEntry, default: ElasticityPolicy) -> AssetsDefinition:
    key = stream_asset_key(entry.name)

    @asset(
        key=dashboard_asset_key(entry.name),
        group_name=HEALTH_GROUP,
        deps=[key],
        description=f"The `{entry.name}` stream's last hour: rates, lag, p99 vs SLO, channels, rescales (PNG).",
    )
    def dashboard(
        context: AssetExecutionContext, config: DashboardConfig, esp_settings: EspSettingsResource
    ) -> MaterializeResult:
        spec = stream_spec(esp_settings.load(), entry)
        try:
            slo_ms = load_policy(spec.control_dir, default).slo_s * 1000
        except PolicyFileError as error:
            context.log.warning(str(error))
            slo_ms = default.slo_s * 1000
        samples = recent_samples(context.instance, key, config.window_s, time.time())
        path = uris.join(spec.plots_dir, "dashboard.png")
        png = render_dashboard(samples, slo_ms, f"{entry.name}: last {config.window_s / 60:.0f} min", path)
        image = base64.b64encode(png).decode()
        return MaterializeResult(
            metadata={
                "dashboard": MetadataValue.md(f"![{entry.name} dashboard](data:image/png;base64,{image})"),
                "dashboard_png": MetadataValue.path(str(path)),
                "observations": len(samples),
                "rescales": len(rescales(samples)),
                "slo_ms": slo_ms,
            }
        )

    return dashboard
