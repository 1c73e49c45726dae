"""The admission benchmark (seed 004 on the real stack): one elastic stream per mode, with and
without admission control, under the same step of load from 0.5× to 5× of the stage's capacity.

1. **calibrate**: the stage's capacity (lines/s) is measured on a pre-loaded topic, after a warm-up;
2. `repetitions` rounds, each running both modes; per mode, a fresh topic and stream: `steady_s`
   at 0.5× capacity, then `overload_s` at 5×; rescales are requested `rescale_after_s` into the
   overload and then every `rescale_every_s` while it lasts, alternately one channel more and back
   (`rescale_times`, `next_rescale_channels`); a request that comes due while the previous one is
   not answered yet is **skipped** (recorded, not sent: a stream takes one request at a time, and
   waiting would move the later requests off their schedule); then the load stops and the stream
   drains the backlog;
3. figures per mode and round: the longest batch once the overload is under control (with
   admission: after the first capped batch; without: after the step), the expected wait of a
   rescale asked at a random moment then, how long each rescale waited for a batch boundary
   (`rescale_waits_s`, their median `rescale_wait_s`), how often the cap changed in the steady
   phase and in the overload's second half; over the rounds, each figure's median, min and max
   (`spread`, `median_block`);
4. **correctness**: the results table equals the batch oracle of the whole topic.

The stage's work per record is a fixed service time (`service_ms`, an I/O-bound stage), so its
capacity does not depend on what else the 2-core machine runs, and 5× of it can be produced.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from benchmarks.repeats import spread
from benchmarks.spark_runs import NATIVE_OUTPUTS, Trickle, check_results, new_topic, produce, wait_caught_up
from elasticity.admission import AdmissionOptions

Step = Callable[[str], None]


@dataclass(frozen=True)
class AdmissionBenchOptions:
    """How the admission benchmark runs; every option has a default."""

    channels: int = 2
    """Channels of the stage at start (the rescales alternate between one more and this)."""
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
    """Seconds into the overload at which the first rescale is requested."""
    rescale_every_s: float | None = 10.0
    """Seconds between later rescale requests while the overload lasts (None or 0: one request)."""
    repetitions: int = 1
    """Rounds, each running both modes on fresh topics (the calibration is done once)."""
    timeout_s: float = 900.0
    """Upper bound of any wait (the drain without admission included)."""
    workdir: str = ".esp/bench/admission"
    """Folder for checkpoints, state and results."""

    def admission(self) -> AdmissionOptions:
        return AdmissionOptions(high_watermark_s=self.high_watermark_s, low_watermark_s=self.low_watermark_s)

    def rescale_times(self) -> list[float]:
        return rescale_times(self.rescale_after_s, self.rescale_every_s, self.overload_s)


def rescale_times(after_s: float, every_s: float | None, overload_s: float) -> list[float]:
    """Seconds into the overload at which rescales are requested: `after_s`, then every `every_s`
    while the overload lasts (None or 0: only the first); ValueError when the first is not in it."""
    if not 0 <= after_s < overload_s:
        raise ValueError(f"the first rescale ({after_s:g} s) must come within the overload (0 to {overload_s:g} s)")
    if every_s is not None and every_s < 0:
        raise ValueError(f"the rescale period must not be negative ({every_s:g} s)")
    if not every_s:
        return [after_s]
    count = int((overload_s - after_s) / every_s - 1e-9) + 1  # every request strictly before the overload's end
    return [round(after_s + k * every_s, 6) for k in range(count)]


def next_rescale_channels(channels: int, committed: int) -> int:
    """The channels the next rescale asks for after `committed` rescales committed: one more than
    at the start, then back, and so on (the stage never grows without bound)."""
    return channels + 1 if committed % 2 == 0 else channels


MEDIAN_FIGURES = (
    "max_batch_s",
    "expected_rescale_wait_s",
    "rescale_wait_s",
    "cap_changes_steady",
    "cap_changes_overload_second_half",
    "query_restarts",
)
"""The per-round figures summarised over the rounds (median, min, max)."""


def median_block(rounds: Sequence[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per mode, each of `MEDIAN_FIGURES` over the rounds (`rounds`: per round, mode -> summary),
    the spread of every rescale wait of every round pooled, and how many rounds were correct."""
    modes = list(dict.fromkeys(mode for summaries in rounds for mode in summaries))
    block: dict[str, dict[str, Any]] = {}
    for mode in modes:
        summaries = [r[mode] for r in rounds if mode in r]
        block[mode] = {figure: spread([s.get(figure) for s in summaries]) for figure in MEDIAN_FIGURES}
        block[mode]["all_rescale_waits_s"] = spread([w for s in summaries for w in s.get("rescale_waits_s") or []])
        block[mode]["rounds"] = len(summaries)
        block[mode]["correct_rounds"] = sum(1 for s in summaries if s.get("correct"))
    return block


def median_round(
    rounds: Sequence[dict[str, dict[str, Any]]], mode: str = "admission", figure: str = "max_batch_s"
) -> int:
    """The index of the round whose `figure` of `mode` is the median one (the lower of the two
    middle ones for an even count; a round without the figure counts as the largest)."""
    if not rounds:
        raise ValueError("no rounds")

    def key(index: int) -> tuple[bool, float, int]:
        value = rounds[index].get(mode, {}).get(figure)
        return (value is None, 0.0 if value is None else float(value), index)

    ranked = sorted(range(len(rounds)), key=key)
    return ranked[(len(ranked) - 1) // 2]


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
    channels: int = 0
    """Channels the batch ran on (a rescale's batch runs on the new layout)."""
    phase_ms: dict[str, float] = field(default_factory=dict)
    """Where the batch's time went (the rescale's migration, the stage, the archive...)."""
    slowest_channel_ms: float | None = None
    """The slowest channel's task, with its fresh worker's warm-up if it had one."""


@dataclass
class ModeResult:
    mode: str
    step_at_s: float
    overload_end_s: float
    sent_lines: dict[str, int]
    batches: list[BatchPoint] = field(default_factory=list)
    rescales_requested_at_s: list[float] = field(default_factory=list)
    """When each rescale sent was requested (seconds since the mode's start)."""
    rescale_channels: list[int] = field(default_factory=list)
    """The channels each rescale sent asked for."""
    rescale_waits_s: list[float | None] = field(default_factory=list)
    """Per rescale sent: from its request to the start of the batch that applied it (None: not applied)."""
    rescales_skipped_at_s: list[float] = field(default_factory=list)
    """Scheduled requests not sent, the previous one being unanswered then (seconds since the start)."""
    correctness: dict[str, Any] = field(default_factory=dict)

    def first_capped_batch(self) -> int | None:
        capped = [b.batch_id for b in self.batches if b.rule == "cap"]
        return capped[0] if capped else None

    def counted_batches(self) -> list[BatchPoint]:
        """The batches once the overload is handled: with admission, batches after the first
        capped one; without, every batch that ended after the step."""
        capped = self.first_capped_batch()
        if self.mode == "admission":
            return [b for b in self.batches if capped is not None and b.batch_id > capped]
        return [b for b in self.batches if b.start_s + b.duration_s > self.step_at_s]

    def max_batch_s(self) -> float | None:
        """The longest of the counted batches."""
        return max((b.duration_s for b in self.counted_batches()), default=None)

    def expected_rescale_wait_s(self) -> float | None:
        """The mean wait for a batch boundary of a rescale asked at a random moment during the
        counted batches: Σd² / 2Σd (a long batch is both likelier to be hit and longer to wait out)."""
        durations = [b.duration_s for b in self.counted_batches()]
        total = sum(durations)
        return sum(d * d for d in durations) / (2 * total) if total > 0 else None

    def rescale_wait_s(self) -> float | None:
        """The median of the measured rescale waits."""
        return spread(self.rescale_waits_s)["median"]

    def cap_changes(self, start_s: float, end_s: float) -> int:
        inside = [b for b in self.batches if start_s <= b.start_s < end_s]
        return sum(1 for before, after in zip(inside, inside[1:], strict=False) if before.cap != after.cap)

    def summary(self) -> dict[str, Any]:
        late_overload = self.step_at_s + (self.overload_end_s - self.step_at_s) / 2
        return {
            "mode": self.mode,
            "max_batch_s": self.max_batch_s(),
            "expected_rescale_wait_s": self.expected_rescale_wait_s(),
            "rescale_wait_s": self.rescale_wait_s(),
            "rescale_waits_s": self.rescale_waits_s,
            "rescale_channels": self.rescale_channels,
            "rescales_asked": len(self.rescales_requested_at_s),
            "rescales_skipped": len(self.rescales_skipped_at_s),
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
    rescales = Rescales(stream.control, options.channels)
    try:
        sent["steady"] = _load(bootstrap, topic, options.low_factor * capacity, options.steady_s, options, 0)
        step_at = time.time()
        sent["overload"] = _load(
            bootstrap,
            topic,
            options.high_factor * capacity,
            options.overload_s,
            options,
            options.keys // 2,
            at=[(t, rescales.ask) for t in options.rescale_times()],
        )
        overload_end = time.time()
        step(
            f"{mode}: load done, {len(rescales.requests)} rescale(s) asked ({len(rescales.skipped)} skipped), draining"
        )
        rescales.wait_for_answers(options.timeout_s)
        wait_caught_up(stream.spec.checkpoint, bootstrap, topic, options.timeout_s, alive)
    finally:
        stream.stop()
    outcome = ModeResult(
        mode=mode,
        step_at_s=step_at - began,
        overload_end_s=overload_end - began,
        sent_lines=sent,
        batches=[_point(m, began) for m in sorted(seen, key=lambda m: m.batch_id)],
        rescales_requested_at_s=[r.requested_at - began for r in rescales.requests],
        rescale_channels=[r.target.channels or 0 for r in rescales.requests],
        rescale_waits_s=rescales.waits(seen),
        rescales_skipped_at_s=[t - began for t in rescales.skipped],
    )
    outcome.correctness = check_results(spark, stream.spec.results_table, bootstrap, topic).to_dict()
    step(f"{mode}: checked")
    return outcome


class Rescales:
    """The rescales one mode asks of its stream through `control` (a ControlChannel), one at a
    time: `ask` sends the next when it falls due, alternately to one channel more and back, or
    skips it (recorded in `skipped`, not sent) while the previous request is unanswered."""

    def __init__(self, control: Any, channels: int, clock: Callable[[], float] = time.time) -> None:
        self.control, self.channels, self.clock = control, channels, clock
        self.requests: list[Any] = []  # RescaleRequest, in the order sent
        self.answers: dict[str, Any] = {}  # request id -> RescaleResult
        self.skipped: list[float] = []  # when a due request was skipped (clock time)

    def ask(self) -> None:
        """Made when due (its requested_at is the moment it is asked)."""
        from pipelines.streams.control import RescaleRequest, RescaleTarget

        if self.requests and self._answer(self.requests[-1].request_id) is None:
            self.skipped.append(self.clock())
            return
        committed = sum(1 for answer in self.answers.values() if answer.committed)
        target = RescaleTarget(op="scale_to", channels=next_rescale_channels(self.channels, committed))
        request = RescaleRequest(target=target, reason="bench", requested_at=self.clock())
        try:
            self.control.request(request)
        except RuntimeError:  # answered, but the request file not removed yet: as good as unanswered
            self.skipped.append(self.clock())
            return
        self.requests.append(request)

    def _answer(self, request_id: str) -> Any:
        if request_id not in self.answers and (answer := self.control.result(request_id)) is not None:
            self.answers[request_id] = answer
        return self.answers.get(request_id)

    def wait_for_answers(self, timeout_s: float) -> None:
        for request in self.requests:
            if request.request_id not in self.answers:
                self.answers[request.request_id] = self.control.wait_for_result(request.request_id, timeout_s)

    def waits(self, seen: Sequence[Any]) -> list[float | None]:
        """Per request sent, from its request to the start of the first batch that applied it
        (`seen`: the stream's BatchMetrics); None when it did not commit or no batch says so."""
        waits: list[float | None] = []
        for request in self.requests:
            answer = self.answers.get(request.request_id)
            applied = [m for m in seen if m.rescale and m.rescale.get("request_id") == request.request_id]
            if answer is None or not answer.committed or not applied:
                waits.append(None)
                continue
            first = min(applied, key=lambda m: m.batch_id)
            waits.append((first.wall_time - first.batch_ms / 1000) - request.requested_at)
        return waits


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
    at: Sequence[tuple[float, Callable[[], None]]] = (),
) -> int:
    """`rate` lines/s for `seconds`, calling each of `at`'s actions that many seconds in; lines sent."""
    trickle = Trickle(bootstrap, topic, options.keys, rate, options.words_per_line, sent=first_key).start()
    began = time.monotonic()
    try:
        for when, action in sorted(at, key=lambda pair: pair[0]):
            time.sleep(max(0.0, when - (time.monotonic() - began)))
            action()
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
        channels=metrics.channels,
        phase_ms={name: round(ms, 1) for name, ms in metrics.phase_ms.items()},
        slowest_channel_ms=max((c.proc_ms for c in metrics.per_channel), default=None),
    )


def run_admission_benchmark(
    spark: SparkSession, bootstrap: str, options: AdmissionBenchOptions, step: Step
) -> dict[str, Any]:
    """Calibrate once, then `repetitions` rounds of both modes under the same step; the JSON
    document of the run: every round's figures, batches and events, and per mode the median,
    min and max of each figure over the rounds."""
    from benchmarks.spark_runs import machine

    capacity = calibrate(spark, bootstrap, options, step)
    rounds: list[dict[str, Any]] = []
    for number in range(1, options.repetitions + 1):

        def in_round(text: str, number: int = number) -> None:
            step(f"round {number}/{options.repetitions}: {text}")

        modes = [run_mode(spark, bootstrap, capacity, options, mode, in_round) for mode in ("admission", "none")]
        rounds.append(round_document(number, modes))
    summaries = [r["modes"] for r in rounds]
    return {
        "options": asdict(options),
        "capacity_lines_per_s": capacity,
        "repetitions": options.repetitions,
        "median": median_block(summaries),
        "rounds": rounds,
        "plotted_round": rounds[median_round(summaries)]["round"],
        "correct": all(r["correct"] for r in rounds),
        "machine": machine(),
    }


def round_document(number: int, modes: Sequence[ModeResult]) -> dict[str, Any]:
    """One round in the JSON: per mode its figures, batches and events (seconds since its start)."""
    summaries = {m.mode: m.summary() for m in modes}
    return {
        "round": number,
        "modes": summaries,
        "batches": {m.mode: [asdict(b) for b in m.batches] for m in modes},
        "events": {
            m.mode: {
                "step_at_s": m.step_at_s,
                "rescales_at_s": m.rescales_requested_at_s,
                "rescales_skipped_at_s": m.rescales_skipped_at_s,
                "load_end_s": m.overload_end_s,
            }
            for m in modes
        },
        "correct": all(s["correct"] for s in summaries.values()),
    }
