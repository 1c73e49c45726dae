"""Realizing a rescale of a real stream: the plan, the online request, the offline migration.

No Dagster here, so the resizing asset and the benchmark share it:

- `target_for(decision, channels)`: the controller's decision (channel indices in the
  snapshot's numbering) -> a `RescaleTarget` (layout channel ids);
- `plan_rescale(layout, target)`: the next layout and exactly the hash ranges that move, the
  moved share of the ring vs the ideal |N'-N|/max(N,N'), shares before/after (a dry run);
- `rescale_online`: a `RescaleRequest` in the control folder, applied by the running stream at
  its next batch boundary (the horizontal barrier), and its result;
- `rescale_offline`: the migration run here with `Migrator` on a stopped stream's state, after
  `recover()`, refused when the stream stopped in the middle of a batch (see `OfflineRefused`).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from os import PathLike, fspath
from typing import Any

from elasticity.control import Decision
from elasticity.layout import HashRange, Layout, diff, ideal_moved_fraction, moved_space_fraction
from orchestration.elasticity.collector import ChannelMap
from orchestration.plots import publish_png
from pipelines.streams.control import (
    ControlChannel,
    RescaleRequest,
    RescaleResult,
    RescaleTarget,
    forgettable,
    written_at,
)
from pipelines.streams.files import StreamFiles
from pipelines.streams.names import FIRST_STAGE, stage_paths
from pipelines.streams.spec import StreamSpec

KEEP_PLOTS = 32
"""Share plots kept per stream (`<control>/plots`), newest first: the UI's recent rescales keep theirs."""


class OfflineRefused(RuntimeError):
    """An offline migration that could lose or double state; the message says what to do."""


def target_for(decision: Decision, channels: ChannelMap) -> RescaleTarget:
    """The rescale target of a decision; split/merge name the snapshot's index, mapped to the channel id."""
    if decision.action in ("scale_out", "scale_in"):
        return RescaleTarget(op="scale_to", channels=decision.to_channels)
    if decision.action in ("split", "merge") and decision.channel is not None:
        return RescaleTarget(op=decision.action, channel=channels.channel_at(decision.channel))
    raise ValueError(f"decision {decision.action!r} (channel={decision.channel}) is not a rescale")


def describe_target(target: RescaleTarget) -> str:
    return (
        f"scale to {target.channels} channels" if target.op == "scale_to" else f"{target.op} channel {target.channel}"
    )


@dataclass(frozen=True)
class RescalePlan:
    """The layout change a target asks for, computed without touching state."""

    before: Layout
    after: Layout
    ranges: tuple[HashRange, ...]

    def renumbered(self, epoch: int) -> RescalePlan:
        """The same plan with its next layout at `epoch` (the ranges do not depend on it)."""
        return RescalePlan(self.before, self.after.renumbered(epoch), self.ranges)

    @property
    def ring_fraction(self) -> float:
        return moved_space_fraction(self.ranges)

    @property
    def ideal_fraction(self) -> float:
        return ideal_moved_fraction(self.before, self.after)

    def summary(self) -> dict[str, Any]:
        return {
            "epoch_before": self.before.epoch,
            "epoch_after": self.after.epoch,
            "channels_before": self.before.n_channels,
            "channels_after": self.after.n_channels,
            "channel_ids_before": list(self.before.channels),
            "channel_ids_after": list(self.after.channels),
            "moved_ranges": len(self.ranges),
            "ring_fraction_moved": round(self.ring_fraction, 6),
            "ideal_fraction": round(self.ideal_fraction, 6),
        }

    def ranges_markdown(self, limit: int = 12) -> str:
        rows = ["| from | to | hash start | hash end | share of ring |", "|---|---|---|---|---|"]
        for r in self.ranges[:limit]:
            rows.append(f"| {r.source} | {r.target} | {r.start} | {r.end} | {r.size / 2**64:.4%} |")
        if len(self.ranges) > limit:
            rows.append(f"| … | … | {len(self.ranges) - limit} more ranges | | |")
        return "\n".join(rows)


def plan_rescale(current: Layout, target: RescaleTarget, epoch: int | None = None) -> RescalePlan:
    """The next layout (at `epoch`, by default E+1) and the hash ranges that change owner."""
    after = target.next_layout(current).renumbered(current.epoch + 1 if epoch is None else epoch)
    return RescalePlan(current, after, tuple(diff(current, after)))


def rescale_online(
    spec: StreamSpec,
    target: RescaleTarget,
    reason: str,
    timeout_s: float,
    plan: RescalePlan | None = None,
    stage: str = FIRST_STAGE,
) -> RescaleResult:
    """Ask the running stream to apply `plan` to elastic stage `stage` at its next batch boundary;
    its typed answer.

    The request carries the planned layout and the epoch it was planned on: the stream applies
    exactly that layout, or refuses it as stale if it rescaled in the meantime. On timeout the
    request stays in the control folder: the stream applies it when it reaches a batch boundary,
    and the sensor treats it as in flight until then.
    """
    plan = plan or plan_on_committed(spec, target, stage)
    control = ControlChannel(stage_paths(spec.folder, stage).control)
    request = RescaleRequest(target=target, reason=reason, base_epoch=plan.before.epoch, planned=plan.after)
    control.request(request)
    return control.wait_for_result(request.request_id, timeout_s)


def plan_on_committed(spec: StreamSpec, target: RescaleTarget, stage: str = FIRST_STAGE) -> RescalePlan:
    """`target` planned on the stage's committed layout (ValueError if it has none or it makes no sense)."""
    files = StreamFiles(spec, stage)
    current = files.committed_layout()
    if current is None:
        raise ValueError(f"stream {spec.name} has no committed layout under {files.paths.elastic}: start it once first")
    return plan_rescale(current, target)


def rescale_offline(
    spec: StreamSpec, target: RescaleTarget, reason: str, plan: RescalePlan | None = None, stage: str = FIRST_STAGE
) -> RescaleResult:
    """Migrate a stopped stream's state of elastic stage `stage` to `plan`'s layout here, with the
    stream's own protocol (under the stream's lease, which every stage shares)."""
    from elasticity.lease import LeaseHeld, acquire

    # Held for the whole migration: a stream start meanwhile is refused, naming this process.
    try:
        lease = acquire(spec.elastic_root, f"offline rescale of {spec.name}", spec.lease_ttl_s)
    except LeaseHeld as held:
        raise OfflineRefused(f"stream {spec.name} is running or being rescaled: {held}") from None
    try:
        plan = plan or plan_on_committed(spec, target, stage)
        return _rescale_offline_leased(spec, plan, reason, lease.fence.check, stage)
    finally:
        lease.release()


def _rescale_offline_leased(
    spec: StreamSpec, plan: RescalePlan, reason: str, fence: Callable[[], None] | None, stage: str
) -> RescaleResult:
    from elasticity.migration import Migrator
    from elasticity.state import BytesCodec, Location
    from elasticity.state.kinds import build_backend

    files = StreamFiles(spec, stage)
    if files.committed_layout() is None:
        raise OfflineRefused(
            f"stream {spec.name} has no committed layout under {files.paths.elastic}: start it once first"
        )
    if (waiting := files.pending_request()) is not None:
        raise OfflineRefused(
            f"request {waiting.request_id} ({describe_target(waiting.target)}) is waiting in {files.paths.control} "
            "for the stream; start the stream so it applies it, or delete the request file, then retry"
        )
    if (batch := files.batch_in_flight()) is not None:
        raise OfflineRefused(
            f"stream {spec.name} stopped in the middle of batch {batch}: some channels may have committed it, and "
            "replaying it under a new layout would count moved keys twice; start the stream until it commits a "
            "batch, stop it, then rescale"
        )
    started = time.perf_counter()
    scratch = os.path.join(files.paths.local, "offline-rescale")  # always on this machine (names)
    # Bytes: the stores hold the operator's encoded values, and a migration moves them as they are.
    backend = build_backend(spec.store_kind, BytesCodec(), files.paths.elastic, scratch)
    migrator = Migrator(Location.of(files.paths.elastic), backend, fence=fence)
    try:
        migrator.recover()
        committed = migrator.registry.committed()
        if committed.epoch != plan.before.epoch:
            raise OfflineRefused(
                f"the plan was made on layout epoch {plan.before.epoch}, the stream is at {committed.epoch}; plan again"
            )
        after = plan.after.renumbered(migrator.registry.next_epoch())  # epochs are never reused
        report = migrator.migrate(after)
    finally:
        backend.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return RescaleResult(
        request_id=f"offline-{after.epoch}",
        status="committed",
        mode="offline",
        reason=reason,
        pause_ms=(time.perf_counter() - started) * 1000,
        layout=after,
        report=report,
    )


def write_share_plot(plan: RescalePlan, path: str | PathLike[str]) -> bytes:
    """A bar chart of each channel's share of the ring before and after; returns the PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    before, after = plan.before.shares(), plan.after.shares()
    channels = sorted(set(before) | set(after))
    x = np.arange(len(channels))
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(channels) + 2), 3.2))
    ax.bar(x - 0.2, [before.get(c, 0.0) for c in channels], width=0.4, label=f"epoch {plan.before.epoch}")
    ax.bar(x + 0.2, [after.get(c, 0.0) for c in channels], width=0.4, label=f"epoch {plan.after.epoch}")
    ax.set_xticks(x, [str(c) for c in channels])
    ax.set_xlabel("channel")
    ax.set_ylabel("share of the hash ring")
    ax.set_title(
        f"{plan.before.n_channels} → {plan.after.n_channels} channels, moved {plan.ring_fraction:.1%} "
        f"(ideal {plan.ideal_fraction:.1%})"
    )
    ax.legend()
    fig.tight_layout()
    data = publish_png(fig, path, dpi=90)
    plt.close(fig)
    forget_old_plots(fspath(path).rsplit("/", 1)[0])
    return data


def forget_old_plots(folder: str, keep: int = KEEP_PLOTS) -> None:
    """Keep the newest `keep` plots of a stream's control folder (older materializations in the UI
    lose their picture, as their runs do under run retention)."""
    from elasticity.state import Location

    plots = Location.of(folder)
    for name in forgettable(plots, "", ".png", keep, min_age_s=0.0):
        plots.delete_file(name)


def forget_plots_written_before(folder: str, cutoff_s: float) -> list[str]:
    """Delete the plots of a stream's control folder written before `cutoff_s` (epoch seconds):
    run retention calls it with its own cutoff, so a plot lives as long as the run that drew it."""
    from elasticity.state import Location

    plots = Location.of(folder)
    old = [name for name, written in written_at(plots).items() if name.endswith(".png") and written < cutoff_s]
    for name in old:
        plots.delete_file(name)
    return old


def result_json(result: RescaleResult) -> str:
    """The stream's result without the bulky layout document."""
    return result.model_dump_json(exclude={"layout"})
