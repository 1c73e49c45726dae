"""The admission benchmark (seed 004 on the real stack): one elastic stream per mode, with and
without admission control, under the same step of load from 0.5× to 5× of the stage's capacity.

1. **calibrate**: the stage's capacity (lines/s) is measured on a pre-loaded topic, after a warm-up;
2. per mode, a fresh topic and stream: `steady_s` at 0.5× capacity, then `overload_s` at 5×; a
   rescale (one more channel) is requested `rescale_after_s` into the overload; then the load
   stops and the stream drains the backlog;
3. figures per mode: the longest batch once the overload is under control (with admission: after
   the first capped batch; without: after the step), how long the rescale waited for a batch
   boundary, how often the cap changed in the steady phase and in the overload's second half;
4. **correctness**: the results table equals the batch oracle of the whole topic.

The stage's work per record is a fixed service time (`service_ms`, an I/O-bound stage), so its
capacity does not depend on what else the 2-core machine runs, and 5× of it can be produced.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from benchmarks.spark_runs import NATIVE_OUTPUTS, Trickle, check_results, new_topic, produce, wait_caught_up
from elasticity.admission import AdmissionOptions

Step = Callable[[str], None]


@dataclass(frozen=True)
class AdmissionBenchOptions:
    """How the admission benchmark runs; every option has a default."""

    channels: int = 2
    """Channels of the stage at start (the rescale adds one)."""
    topic_partitions: int = 4
    """Partitions of each input topic."""
    service_ms: float = 1.0
    """Service time per keyed record in the stage: sets its capacity."""
    words_per_line: int = 8
    """Words per produced line."""
    keys: int = 1_000_000
    """Distinct words the load draws from (so a batch's work grows with its lines)."""
    calibration_lines: int = 4_000
    """Lines of the capacity measurement."""
    steady_s: float = 20.0
    """Seconds at the low load before the step."""
    overload_s: float = 30.0
    """Seconds at the high load."""
    low_factor: float = 0.5
    """Load before the step, × capacity."""
    high_factor: float = 5.0
    """Load after the step, × capacity."""
    high_watermark_s: float = 3.0
    """Admission control's high watermark (batch duration)."""
    low_watermark_s: float = 1.0
    """Admission control's low watermark."""
    trigger_seconds: float = 0.5
    """Micro-batch trigger interval."""
    rescale_after_s: float = 15.0
    """Seconds into the overload at which a rescale is requested."""
    timeout_s: float = 900.0
    """Upper bound of any wait (the drain without admission included)."""
    workdir: str = ".esp/bench/admission"
    """Folder for checkpoints, state and results."""

    def admission(self) -> AdmissionOptions:
        return AdmissionOptions(high_watermark_s=self.high_watermark_s, low_watermark_s=self.low_watermark_s)


@dataclass
class BatchPoint:
    """One batch as the benchmark plots it (times relative to the mode's start)."""

    batch_id: int
    start_s: float
    duration_s: float
    admitted: int | None
    cap: int | None
    rule: str | None
    restart_ms: float | None


@dataclass
class ModeResult:
    mode: str
    step_at_s: float
    rescale_requested_at_s: float
    overload_end_s: float
    sent_lines: dict[str, int]
    batches: list[BatchPoint] = field(default_factory=list)
    rescale_wait_s: float | None = None
    correctness: dict[str, Any] = field(default_factory=dict)

    def first_capped_batch(self) -> int | None:
        capped = [b.batch_id for b in self.batches if b.rule == "cap"]
        return capped[0] if capped else None

    def max_batch_s(self) -> float | None:
        """The longest batch once the overload is handled: with admission, batches after the first
        capped one; without, every batch that started after the step."""
        capped = self.first_capped_batch()
        if self.mode == "admission":
            chosen = [b for b in self.batches if capped is not None and b.batch_id > capped]
        else:
            chosen = [b for b in self.batches if b.start_s + b.duration_s > self.step_at_s]
        return max((b.duration_s for b in chosen), default=None)

    def cap_changes(self, start_s: float, end_s: float) -> int:
        inside = [b for b in self.batches if start_s <= b.start_s < end_s]
        return sum(1 for before, after in zip(inside, inside[1:], strict=False) if before.cap != after.cap)

    def summary(self) -> dict[str, Any]:
        late_overload = self.step_at_s + (self.overload_end_s - self.step_at_s) / 2
        return {
            "mode": self.mode,
            "max_batch_s": self.max_batch_s(),
            "rescale_wait_s": self.rescale_wait_s,
            "cap_changes_steady": self.cap_changes(0.0, self.step_at_s),
            "cap_changes_overload_second_half": self.cap_changes(late_overload, self.overload_end_s),
            "first_capped_batch": self.first_capped_batch(),
            "query_restarts": sum(1 for b in self.batches if b.restart_ms),
            "query_restart_ms": [b.restart_ms for b in self.batches if b.restart_ms],
            "batches": len(self.batches),
            "sent_lines": self.sent_lines,
            "correct": self.correctness.get("ok"),
        }


def calibrate(spark: SparkSession, bootstrap: str, options: AdmissionBenchOptions, step: Step) -> float:
    """The stage's capacity in lines/s: a warm-up batch, then `calibration_lines` as one backlog."""
    from pipelines.streams.runner import ElasticStream

    topic = new_topic(bootstrap, "bench-admission-calibrate", options.topic_partitions)
    stream = ElasticStream(spark, _spec(bootstrap, topic, "calibrate", options, admission=None))
    stream.start()
    alive = lambda: stream.query is not None and stream.query.isActive  # noqa: E731
    try:
        produce(bootstrap, topic, _lines(0, 500, options))
        wait_caught_up(stream.spec.checkpoint, bootstrap, topic, options.timeout_s, alive)
        began = time.time()
        produce(bootstrap, topic, _lines(500, options.calibration_lines, options))
        ended = wait_caught_up(stream.spec.checkpoint, bootstrap, topic, options.timeout_s, alive)
    finally:
        stream.stop()
    capacity = options.calibration_lines / max(1e-3, ended - began)
    step(f"calibrated: {capacity:,.0f} lines/s")
    return capacity


def run_mode(
    spark: SparkSession, bootstrap: str, capacity: float, options: AdmissionBenchOptions, mode: str, step: Step
) -> ModeResult:
    """One stream under the step load, `mode` "admission" or "none"; its batches and figures."""
    from pipelines.streams.control import RescaleRequest, RescaleTarget
    from pipelines.streams.metrics import BatchMetrics
    from pipelines.streams.runner import ElasticStream

    topic = new_topic(bootstrap, f"bench-admission-{mode}", options.topic_partitions)
    admission = options.admission() if mode == "admission" else None
    seen: list[BatchMetrics] = []
    stream = ElasticStream(spark, _spec(bootstrap, topic, mode, options, admission), on_metrics=seen.append)
    stream.start()
    alive = lambda: stream.ended_unasked() is None  # noqa: E731  (a query swapped for a new cap is alive)
    began = time.time()
    sent: dict[str, int] = {}
    try:
        sent["steady"] = _load(bootstrap, topic, options.low_factor * capacity, options.steady_s, options, 0)
        step_at = time.time()
        requests: list[RescaleRequest] = []

        def ask_for_a_rescale() -> None:  # made when sent: its requested_at is the moment it is asked
            target = RescaleTarget(op="scale_to", channels=options.channels + 1)
            requests.append(RescaleRequest(target=target, reason="bench"))
            stream.control.request(requests[0])

        sent["overload"] = _load(
            bootstrap,
            topic,
            options.high_factor * capacity,
            options.overload_s,
            options,
            options.keys // 2,
            at=(options.rescale_after_s, ask_for_a_rescale),
        )
        (request,) = requests
        overload_end = time.time()
        step(f"{mode}: load done, draining")
        result = stream.control.wait_for_result(request.request_id, options.timeout_s)
        wait_caught_up(stream.spec.checkpoint, bootstrap, topic, options.timeout_s, alive)
    finally:
        stream.stop()
    outcome = ModeResult(
        mode=mode,
        step_at_s=step_at - began,
        rescale_requested_at_s=request.requested_at - began,
        overload_end_s=overload_end - began,
        sent_lines=sent,
        batches=[_point(m, began) for m in sorted(seen, key=lambda m: m.batch_id)],
    )
    applied = [m for m in seen if m.rescale and m.rescale.get("request_id") == request.request_id]
    if result.committed and applied:
        outcome.rescale_wait_s = (applied[0].wall_time - applied[0].batch_ms / 1000) - request.requested_at
    outcome.correctness = check_results(spark, stream.spec.results_table, bootstrap, topic).to_dict()
    step(f"{mode}: checked")
    return outcome


def _spec(bootstrap: str, topic: str, mode: str, options: AdmissionBenchOptions, admission: AdmissionOptions | None):
    from pipelines.streams.spec import StreamSpec

    return StreamSpec(
        name=f"bench-admission-{mode}",
        input_topic=topic,
        bootstrap_servers=bootstrap,
        root=str(Path(options.workdir).resolve() / topic),
        channels=options.channels,
        trigger_seconds=options.trigger_seconds,
        service_ms_per_record=options.service_ms,
        admission=admission,
        **NATIVE_OUTPUTS,
    )


def _lines(first: int, count: int, options: AdmissionBenchOptions) -> list[bytes]:
    return [
        " ".join(f"a{(i * options.words_per_line + j) % options.keys}" for j in range(options.words_per_line)).encode()
        for i in range(first, first + count)
    ]


def _load(
    bootstrap: str,
    topic: str,
    rate: float,
    seconds: float,
    options: AdmissionBenchOptions,
    first_key: int,
    at: tuple[float, Callable[[], None]] | None = None,
) -> int:
    """`rate` lines/s for `seconds` (calling `at`'s action once, that many seconds in); lines sent."""
    trickle = Trickle(bootstrap, topic, options.keys, rate, options.words_per_line, sent=first_key).start()
    began = time.monotonic()
    try:
        if at is not None:
            time.sleep(max(0.0, at[0] - (time.monotonic() - began)))
            at[1]()
        time.sleep(max(0.0, seconds - (time.monotonic() - began)))
    finally:
        trickle.stop()
    return trickle.sent - first_key


def _point(metrics, began: float) -> BatchPoint:
    duration = metrics.batch_ms / 1000
    return BatchPoint(
        batch_id=metrics.batch_id,
        start_s=metrics.wall_time - duration - began,
        duration_s=duration,
        admitted=metrics.admitted_records,
        cap=metrics.admission_cap,
        rule=metrics.admission_rule,
        restart_ms=metrics.query_restart_ms,
    )


def run_admission_benchmark(
    spark: SparkSession, bootstrap: str, options: AdmissionBenchOptions, step: Step
) -> dict[str, Any]:
    """Calibrate, then both modes under the same step; the JSON document of the run."""
    from benchmarks.spark_runs import machine

    capacity = calibrate(spark, bootstrap, options, step)
    modes = [run_mode(spark, bootstrap, capacity, options, mode, step) for mode in ("admission", "none")]
    summaries = {m.mode: m.summary() for m in modes}
    return {
        "options": asdict(options),
        "capacity_lines_per_s": capacity,
        "modes": summaries,
        "batches": {m.mode: [asdict(b) for b in m.batches] for m in modes},
        "events": {
            m.mode: {"step_at_s": m.step_at_s, "rescale_at_s": m.rescale_requested_at_s, "load_end_s": m.overload_end_s}
            for m in modes
        },
        "correct": all(s["correct"] for s in summaries.values()),
        "machine": machine(),
    }
