"""The scaling controller: Gedik et al.'s SASO rules over levels, plus targeted split and merge.

`ScalingController.decide(state, evaluation, now_s)` is a pure function: it returns a new
`ControllerState` and a `Decision` and touches nothing else, so the Dagster sensor can keep the
state in its cursor (`state.to_json()` / `ControllerState.from_json`). One call per sampling
period. The order of reasoning follows Gedik's flowchart:

1. cooldown / warm-up: no decision while the last rescale settles or the windows refill;
2. detect a workload change from congestion flips and throughput changes between the last and
   the current observation (P3: it rose, forget history above the level; P4: it fell, forget
   history below), or from an input rate well below the one under which a lower level was
   congested; then record (throughput, congested, input rate) for the current level;
3. congested: a minority of channels overloaded while the rest are fine is key skew, so split
   the hottest one; otherwise P5 (remote congestion: the level above did not raise throughput
   over the level below, go back down) or P1 (scale up, unless history at the higher level shows
   no gain) with P6 rapid scaling (jump to the level the measured per-channel capacity says
   is needed, not just the next one);
4. not congested: P2 (scale down to the lowest level whose estimated utilization fits, or, with
   no capacity measured yet, one level when most channels are underloaded; never into a level
   that history shows congested), else merge a lone underloaded channel.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from elasticity.control.decision import Action, Decision
from elasticity.control.levels import Levels
from elasticity.control.options import ControllerOptions
from elasticity.control.signals import Evaluation

WorkloadChange = Literal["up", "down", "unknown"]


class LevelRecord(BaseModel):
    """Gedik's per-level history: the last throughput and congestion seen at this level."""

    model_config = ConfigDict(frozen=True)

    throughput_rps: float
    congested: bool
    time_s: float
    input_rps: float = Field(0.0, description="The input rate when recorded (0: unknown, as in older cursors).")


class ReadyTick(BaseModel):
    """The previous ready tick, to detect workload changes against."""

    model_config = ConfigDict(frozen=True)

    level: int
    channels: int
    throughput_rps: float
    congested: bool
    time_s: float


class ControllerState(BaseModel):
    """Everything the controller remembers between ticks; JSON round-trips exactly."""

    model_config = ConfigDict(frozen=True)

    history: dict[int, LevelRecord] = Field(default_factory=dict, description="Per level index.")
    last: ReadyTick | None = Field(None, description="The previous ready observation.")
    reference_throughput_rps: float | None = Field(
        None, description="Steady throughput at the current level since it was entered or the workload last changed."
    )
    channel_capacity_rps: float | None = Field(
        None,
        description="Records/s one saturated channel processes: measured at the last congestion, raised to any "
        "higher per-channel throughput seen since.",
    )
    cooldown_until_s: float | None = Field(None, description="No decision before this clock time.")
    decisions: int = Field(0, description="Rescale decisions taken so far.")

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> ControllerState:
        return cls.model_validate_json(text)


def detect_workload_change(
    last: ReadyTick | None,
    reference_throughput_rps: float | None,
    level: int,
    channels: int,
    throughput_rps: float,
    congested: bool,
    steady: bool,
    change_factor: float,
) -> WorkloadChange:
    """Gedik's workload-change detection between two consecutive observations.

    Same level: a congestion flip, or (while steady) a throughput change beyond the factor
    against the level's reference. One level down: congestion vanished or throughput rose.
    One level up: congestion appeared or throughput fell. A split/merge (same level, other
    channel count) is not judged by congestion flips: the flip is the split's own effect.
    """
    if last is None:
        return "unknown"
    if level == last.level:
        if channels == last.channels and congested != last.congested:
            return "up" if congested else "down"
        if steady and not congested and reference_throughput_rps:
            if throughput_rps > reference_throughput_rps * (1 + change_factor):
                return "up"
            if throughput_rps < reference_throughput_rps * (1 - change_factor):
                return "down"
        return "unknown"
    if level < last.level:
        if last.congested and not congested:
            return "down"
        if throughput_rps > last.throughput_rps * (1 + change_factor):
            return "up"
        return "unknown"
    if not last.congested and congested:
        return "up"
    if throughput_rps < last.throughput_rps * (1 - change_factor):
        return "down"
    return "unknown"


def input_fell_below_congested_levels(
    history: dict[int, LevelRecord], level: int, input_rate_rps: float, change_factor: float
) -> bool:
    """P4 seen through the input rate: a lower level was congested under an input rate that has
    since fallen by more than the change factor, so the workload that congested it is gone.

    Gedik detects a fall only between consecutive observations; a load that falls while a
    rescale settles (no observation during warm-up) would otherwise keep the lower level's
    congested record, and with it the stage, at the higher level for good.
    """
    return any(
        rec.congested and input_rate_rps < rec.input_rps * (1 - change_factor)
        for lvl, rec in history.items()
        if lvl < level
    )


def forget_history(history: dict[int, LevelRecord], level: int, change: WorkloadChange) -> dict[int, LevelRecord]:
    """P3: the workload rose, so records above the level are stale; P4: it fell, records below are."""
    if change == "up":
        return {lvl: rec for lvl, rec in history.items() if lvl <= level}
    if change == "down":
        return {lvl: rec for lvl, rec in history.items() if lvl >= level}
    return dict(history)


def measured_capacity(evaluation: Evaluation) -> float:
    """Per-channel capacity seen while congested: overloaded channels are saturated, so their
    throughput is what one channel can do; without overloaded channels, the stage average."""
    overloaded = evaluation.overloaded
    if overloaded.any():
        return float(np.mean(evaluation.latest_throughput_rps[overloaded]))
    return evaluation.total_throughput_rps / max(1, evaluation.channels)


def estimate_capacity(previous: float | None, evaluation: Evaluation) -> float | None:
    """The per-channel capacity after this tick: measured when congested, raised to what the
    channels just did whenever that is more (a channel that processed this much can)."""
    capacity = previous
    if evaluation.congested and (measured := measured_capacity(evaluation)) > 0:
        # Nothing processed in the window (a long first batch still running) says nothing
        # about capacity; a zero would disable P6 and P2's estimate until the next congestion.
        capacity = measured
    demonstrated = evaluation.total_throughput_rps / max(1, evaluation.channels)
    if capacity and demonstrated > capacity:
        # A congestion caught while a batch was still running measures low, and a low
        # estimate would hold P2 up for good.
        capacity = demonstrated
    return capacity


class ScalingController:
    """Decides one tick. Stateless itself: all memory is in the `ControllerState` passed in."""

    def __init__(self, options: ControllerOptions) -> None:
        self.options = options
        self.levels = Levels.between(options.min_channels, options.max_channels)

    # ------------------------------------------------------------------ entry point
    def decide(self, state: ControllerState, evaluation: Evaluation, now_s: float) -> tuple[ControllerState, Decision]:
        channels = evaluation.channels
        if state.cooldown_until_s is not None and now_s < state.cooldown_until_s:
            wait = state.cooldown_until_s - now_s
            return state, self._none(
                now_s, channels, "cooldown", f"cooling down for {wait:.1f} s more after a rescale", {}
            )
        if not evaluation.ready_up:
            return state, self._none(
                now_s, channels, "warmup", "detector windows are refilling after a layout change", {}
            )

        level = self.levels.level_of(channels)
        throughput = evaluation.total_throughput_rps
        congested = evaluation.congested
        steady = not congested and not evaluation.congestion.draining
        change = detect_workload_change(
            state.last,
            state.reference_throughput_rps,
            level,
            channels,
            throughput,
            congested,
            steady,
            self.options.throughput_change_factor,
        )
        if (
            change == "unknown"
            and not congested
            and input_fell_below_congested_levels(
                state.history, level, evaluation.recent_max_input_rate_rps, self.options.throughput_change_factor
            )
        ):
            change = "down"
        history = forget_history(state.history, level, change)
        history[level] = LevelRecord(
            throughput_rps=throughput, congested=congested, time_s=now_s, input_rps=evaluation.input_rate_rps
        )

        reference = state.reference_throughput_rps
        if state.last is None or state.last.level != level or state.last.channels != channels or change != "unknown":
            reference = None
        if reference is None and steady:
            reference = throughput

        capacity = estimate_capacity(state.channel_capacity_rps, evaluation)
        state = state.model_copy(
            update={
                "history": history,
                "last": ReadyTick(
                    level=level, channels=channels, throughput_rps=throughput, congested=congested, time_s=now_s
                ),
                "reference_throughput_rps": reference,
                "channel_capacity_rps": capacity,
            }
        )
        signals = self._signals(evaluation, level, capacity, change)
        if congested:
            decision = self._when_congested(state, evaluation, level, now_s, signals)
        else:
            decision = self._when_not_congested(state, evaluation, level, now_s, signals)
        if decision.is_rescale:
            state = state.model_copy(
                update={"cooldown_until_s": now_s + self.options.cooldown_s, "decisions": state.decisions + 1}
            )
        return state, decision

    # ------------------------------------------------------------------ congested: split, P5, P1/P6
    def _when_congested(
        self, state: ControllerState, ev: Evaluation, level: int, now_s: float, signals: dict[str, float]
    ) -> Decision:
        channels = ev.channels
        forgot = self._forgot_text(signals)
        skew_channel = self._skewed_channel(ev)
        if skew_channel is not None:
            if channels >= self.options.max_channels:
                return self._none(
                    now_s,
                    channels,
                    "bounds",
                    f"channel {skew_channel} is overloaded but the stage is at the maximum of {channels} channels",
                    signals,
                )
            return self._decision(
                now_s,
                "split",
                channels,
                channels + 1,
                "split",
                signals,
                f"channel {skew_channel} is overloaded ({ev.late_share[skew_channel]:.0%} late probes, "
                f"{ev.latest_latency_s[skew_channel]:.2f} s) while {channels - len(ev.overloaded_channels)} of "
                f"{channels} are not: key skew, split it into {channels + 1} channels{forgot}",
                channel=skew_channel,
            )

        remote_level = self._remote_congestion_level(state, level, ev.total_throughput_rps)
        if remote_level is not None:
            target = self.levels.channels_at(remote_level)
            below = state.history[remote_level]
            return self._decision(
                now_s,
                "scale_in",
                channels,
                target,
                "P5",
                signals,
                f"congested at {channels} channels with {ev.total_throughput_rps:,.0f} rec/s, no more than "
                f"{below.throughput_rps:,.0f} rec/s at {target}: remote congestion, scale back in to {target}{forgot}",
            )

        if level >= self.levels.top:
            return self._none(
                now_s,
                channels,
                "bounds",
                f"congested (index {ev.congestion.index:.2f}) but already at the maximum of {channels} channels",
                signals,
            )
        target_level = self._scale_out_level(state, ev, level)
        if target_level <= level:
            blocked = self._no_gain_level_above(state, level, ev.total_throughput_rps)
            assert blocked is not None  # _scale_out_level only holds for a no-gain record
            rec = state.history[blocked]
            return self._none(
                now_s,
                channels,
                "P1",
                f"congested, but history at {self.levels.channels_at(blocked)} channels shows "
                f"{rec.throughput_rps:,.0f} rec/s, no gain over {ev.total_throughput_rps:,.0f}: "
                f"hold at {channels}{forgot}",
                signals,
            )
        target = self.levels.channels_at(target_level)
        jumped = self.levels.level_of(target) - level
        rule = "P1+P6" if jumped > 1 else "P1"
        return self._decision(
            now_s,
            "scale_out",
            channels,
            target,
            rule,
            signals,
            f"congested (index {ev.congestion.index:.2f}, lag {ev.congestion.lag_s:.1f} s of input, "
            f"{_seconds(ev.congestion.drain_s)} to drain, "
            f"{len(ev.overloaded_channels)} of {channels} channels overloaded) at {ev.input_rate_rps:,.0f} rec/s: "
            f"scale out {jumped} level(s) to {target} channels{forgot}",
        )

    def _skewed_channel(self, ev: Evaluation) -> int | None:
        """The hottest channel if the overload is confined to a minority while the typical channel is fine."""
        if not self.options.enable_split_merge:
            return None
        hot = ev.overloaded_channels
        allowed = max(1, math.floor(self.options.skew_max_share * ev.channels))
        if not hot or len(hot) > allowed or len(hot) >= ev.channels:
            return None
        if float(np.median(ev.late_share)) > 0:
            return None  # the typical channel is also late: load, not skew
        return max(hot, key=lambda c: (ev.late_share[c], ev.latest_latency_s[c]))

    def _remote_congestion_level(self, state: ControllerState, level: int, throughput: float) -> int | None:
        """P5: the highest congested level below ours whose throughput we do not beat by min_gain."""
        below = [lvl for lvl, rec in state.history.items() if lvl < level and rec.congested]
        if not below:
            return None
        nearest = max(below)
        if throughput <= state.history[nearest].throughput_rps * (1 + self.options.min_gain_factor):
            return nearest
        return None

    def _scale_out_level(self, state: ControllerState, ev: Evaluation, level: int) -> int:
        """P1 + P6: at least one level up, as far as the capacity estimate needs, never into a level
        that history shows gave no throughput gain."""
        target = level + 1
        capacity = state.channel_capacity_rps
        if capacity and capacity > 0:
            needed = ev.input_rate_rps / (capacity * self.options.scale_out_utilization)
            target = max(target, self.levels.level_covering(needed))
        target = min(target, self.levels.top)
        # Gedik looks one level up; with jumps, a no-gain record at ANY higher level means the
        # bottleneck is not here (remote), and every level between would be probed in vain.
        if self._no_gain_level_above(state, level, ev.total_throughput_rps) is not None:
            return level
        return target

    def _no_gain_level_above(self, state: ControllerState, level: int, throughput: float) -> int | None:
        """The lowest level above ours recorded congested with no more throughput than we have now."""
        limit = throughput * (1 + self.options.min_gain_factor)
        no_gain = [
            lvl for lvl, rec in state.history.items() if lvl > level and rec.congested and rec.throughput_rps <= limit
        ]
        return min(no_gain) if no_gain else None

    # ------------------------------------------------------------------ not congested: P2, merge
    def _when_not_congested(
        self, state: ControllerState, ev: Evaluation, level: int, now_s: float, signals: dict[str, float]
    ) -> Decision:
        channels = ev.channels
        forgot = self._forgot_text(signals)
        if not ev.ready_down:
            return self._none(now_s, channels, "warmup", "not congested; underload window still refilling", signals)
        if channels <= self.options.min_channels:
            return self._none(
                now_s, channels, "bounds", f"not congested, already at the minimum of {channels} channels", signals
            )

        target_level, why_not = self._scale_in_level(state, ev, level)
        if target_level is not None:
            target = self.levels.channels_at(target_level)
            capacity = state.channel_capacity_rps
            fit = (
                f", estimated utilization {ev.recent_max_input_rate_rps / (target * capacity):.0%}"
                if capacity
                else ", probing (no capacity measured yet)"
            )
            return self._decision(
                now_s,
                "scale_in",
                channels,
                target,
                "P2",
                signals,
                f"not congested (index {ev.congestion.index:.2f}) at {ev.input_rate_rps:,.0f} rec/s: "
                f"scale in to {target} channels{fit}{forgot}",
            )
        lone = self._lone_underloaded_channel(ev)
        if lone is not None:
            return self._decision(
                now_s,
                "merge",
                channels,
                channels - 1,
                "merge",
                signals,
                f"channel {lone} is underloaded ({ev.light_share[lone]:.0%} of periods below the low watermark "
                f"of its peak) while the others are not: merge it into its ring neighbours "
                f"({channels - 1} channels){forgot}",
                channel=lone,
            )
        return self._none(now_s, channels, "P2", f"not congested; {why_not}: hold at {channels}{forgot}", signals)

    def _scale_in_level(self, state: ControllerState, ev: Evaluation, level: int) -> tuple[int | None, str]:
        """P2: the lowest level below the current count that (a) the capacity estimate says fits
        under scale_in_utilization (one level, Gedik's probe, if no capacity is known yet) and
        (b) no history record on the way down shows congested. (None, why) when nothing fits."""
        counts = self.levels.counts
        highest_below = level if counts[level] < ev.channels else level - 1
        if highest_below < 0:
            return None, "no level below"
        capacity = state.channel_capacity_rps
        rate = ev.recent_max_input_rate_rps
        if capacity and capacity > 0:
            needed = rate / (capacity * self.options.scale_in_utilization)
            target = self.levels.level_covering(needed)
            if target > highest_below:
                lower = counts[highest_below]
                return None, (
                    f"{lower} channels would run at {rate / (lower * capacity):.0%} "
                    f"(> {self.options.scale_in_utilization:.0%})"
                )
        elif float(np.mean(ev.underloaded)) > 0.5:
            # No capacity measured yet: Gedik's P2 would probe one level down on every tick that
            # is not congested; we probe only when eSault's underload says most channels are light,
            # so a freshly started, well-sized stage is not walked down into congestion.
            target = highest_below
        else:
            return None, "no capacity measured yet and the stage is not underloaded"
        congested_on_way = [
            lvl for lvl in range(target, highest_below + 1) if (rec := state.history.get(lvl)) and rec.congested
        ]
        if congested_on_way:
            target = max(congested_on_way) + 1
            if target > highest_below:
                return None, f"history shows {counts[target - 1]} channels congested"
        return target, ""

    def _lone_underloaded_channel(self, ev: Evaluation) -> int | None:
        if not self.options.enable_split_merge:
            return None
        light = ev.underloaded_channels
        allowed = max(1, math.floor(self.options.merge_max_share * ev.channels))
        if not light or len(light) > allowed or len(light) >= ev.channels:
            return None
        if float(np.median(ev.light_share)) > 0:
            return None  # the typical channel is light too: the whole stage is, which is P2's business
        return min(light, key=lambda c: ev.latest_throughput_rps[c])

    # ------------------------------------------------------------------ helpers
    def _signals(self, ev: Evaluation, level: int, capacity: float | None, change: WorkloadChange) -> dict[str, float]:
        return {
            "level": float(level),
            "congestion_index": round(ev.congestion.index, 4),
            "lag_s": round(ev.congestion.lag_s, 4),
            # JSON has no infinity: a stage that processed nothing shows a day.
            "drain_s": round(min(ev.congestion.drain_s, 86_400.0), 4),
            "input_rate_rps": ev.input_rate_rps,
            "throughput_rps": ev.total_throughput_rps,
            "overloaded_channels": float(len(ev.overloaded_channels)),
            "underloaded_channels": float(len(ev.underloaded_channels)),
            "max_latency_s": float(np.max(ev.latest_latency_s)),
            "channel_capacity_rps": float(capacity) if capacity else 0.0,
            "workload_change": {"up": 1.0, "down": -1.0, "unknown": 0.0}[change],
        }

    @staticmethod
    def _forgot_text(signals: dict[str, float]) -> str:
        change = signals.get("workload_change", 0.0)
        if change > 0:
            return " (P3: workload rose, history above forgotten)"
        if change < 0:
            return " (P4: workload fell, history below forgotten)"
        return ""

    @staticmethod
    def _decision(
        now_s: float,
        action: Action,
        from_channels: int,
        to_channels: int,
        rule: str,
        signals: dict[str, float],
        reason: str,
        channel: int | None = None,
    ) -> Decision:
        return Decision(
            time_s=now_s,
            action=action,
            from_channels=from_channels,
            to_channels=to_channels,
            channel=channel,
            rule=rule,
            signals=signals,
            reason=reason,
        )

    @staticmethod
    def _none(now_s: float, channels: int, rule: str, reason: str, signals: dict[str, float]) -> Decision:
        return Decision(
            time_s=now_s,
            action="none",
            from_channels=channels,
            to_channels=channels,
            rule=rule,
            signals=signals,
            reason=reason,
        )


def _seconds(value: float) -> str:
    return "never" if value == float("inf") else f"{value:.1f} s"
