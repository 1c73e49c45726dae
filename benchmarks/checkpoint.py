"""The checkpoint benchmark (seed 003 on the real stack): three snapshot policies under the same
eSault load, each stream SIGKILLed at regular intervals, recovery measured after every kill.

Per policy (a short fixed period, a long fixed period, adaptive), a fresh topic and stream
(`esp stream run` in its own process group, so a SIGKILL takes its JVM and Python workers):

1. a warm-up loads the vocabulary once, waits for a snapshot, loads it twice more, kills and
   restarts the stream (so the policies know the restore and fold rates from a measured rebuild);
   then the load generator plays one eSault cycle (rise, peak, fall, valley);
2. every `kill_every_s` (once the previous restart's backlog is caught up, and mid-batch) the
   stream is SIGKILLed and started again at once;
3. each recovery is measured from the stream's own metrics: *restart* is kill → first batch
   committed again (it includes starting a JVM and a Spark session, the same for every policy);
   a channel's *recovery* is its task time in that first batch: rebuilding its working set from
   the durable history (restore the newest snapshot, fold the changelogs after it) plus
   replaying the batch that was in flight: exactly the parts seed 003's model predicts
   (`elasticity.snapshots.recovery`) and the bound applies to;
4. the cost: p99 probe latency over the peak (the seconds a kill disturbs left out), snapshots
   written, their intervals, and the seconds the driver spent writing them during the peak;
5. correctness: the results table equals the batch oracle of the whole topic.

With `repetitions` > 1 the three policies run again, round after round (each round in the same
order, on fresh topics and streams); each figure per policy is then the median over the rounds,
with its min, max and every round's value beside it (`spread`).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.repeats import spread
from benchmarks.spark_runs import last_commit, wait_caught_up
from benchmarks.stream_process import start_stream_process, stop_stream_process

Step = Callable[[str], None]

WARM_UP_FOLD_LOADS = 2
"""The warm-up's second load, in vocabularies: changelogs for its rebuild to fold."""


@dataclass(frozen=True)
class PolicyRun:
    """One policy of the benchmark, as `esp stream run` options."""

    name: str
    policy: str
    period_s: float
    max_recovery_s: float | None = None

    def stream_args(self) -> list[str]:
        args = ["--snapshots", self.policy, "--snapshot-period", str(self.period_s)]
        if self.max_recovery_s is not None:
            args += ["--max-recovery", str(self.max_recovery_s)]
        return args


@dataclass(frozen=True)
class CheckpointBenchOptions:
    """How the checkpoint benchmark runs; every option has a default."""

    peak_rate: float = 2000.0
    """Peak of the eSault trace, lines/s."""
    words_per_line: int = 8
    """Words per line (every word is a key of the stage)."""
    vocabulary: int = 20_000
    """Distinct words: a small state that every batch mostly rewrites, so what a recovery folds
    (changelogs since the snapshot) outweighs what it restores (the snapshot)."""
    duration_s: float = 190.0
    """Seconds of the trace played (one cycle: 20 s valley, rise, 80 s peak, fall, valley)."""
    speed: float = 1.0
    """Time compression of the trace."""
    channels: int = 1
    """Channels of the stage (no rescale in this benchmark)."""
    trigger_seconds: float = 0.5
    """Micro-batch trigger interval."""
    max_offsets: int = 6_000
    """Cap on lines per batch: the catch-up after a restart runs in batches of this size, so the
    batch in flight at a kill (what the recovery replays) stays near a peak batch."""
    max_recovery_s: float = 0.45
    """The adaptive policy's bound (seed 003's thres_recov, scaled to this machine and trace: a
    channel restores its snapshot and replays its batch in ~0.15 s, and folds ~300k changelog
    entries/s of the ~11k a second the peak writes; section 8 of BENCHMARKS.md)."""
    short_period_s: float = 9.0
    """The short fixed period (the paper's 9 s)."""
    long_period_s: float = 14.0
    """The long fixed period (the paper's 14 s)."""
    kill_every_s: float = 45.0
    """Seconds between SIGKILLs, counted from the trace's start."""
    first_kill_s: float = 55.0
    """When the first SIGKILL lands (15 s into the peak; the next near its end, then in the valley)."""
    kill_jitter_s: float = 10.0
    """Each kill lands at a time drawn uniformly within this many seconds of its regular time: the
    same draws for every policy of a round, new ones each round (0: the regular times)."""
    seed: int = 0
    """Seed of those draws (round r draws from seed * 1000 + r)."""
    caught_up_lag: int = 3_000
    """Lines behind the topic's end below which a restarted stream counts as caught up: the next
    kill waits for it, and the seconds from a kill until then are left out of the latency cost."""
    timeout_s: float = 600.0
    """Upper bound of any wait."""
    only: tuple[str, ...] = ("short", "long", "adaptive")
    """The policies to run (all three by default; fewer to calibrate)."""
    repetitions: int = 1
    """Rounds of every policy; the figures are medians over the rounds."""

    def kill_times(self, round_index: int) -> list[float]:
        """When the kills of round `round_index` are due, seconds into the trace (each waits, too,
        for the previous restart's catch-up and a batch in flight)."""
        draws = random.Random(self.seed * 1000 + round_index)
        times, regular = [], self.first_kill_s
        while regular < self.duration_s - 10:
            jitter = draws.uniform(-self.kill_jitter_s, self.kill_jitter_s) if self.kill_jitter_s > 0 else 0.0
            times.append(max(1.0, regular + jitter))
            regular += self.kill_every_s
        return times

    def policies(self) -> list[PolicyRun]:
        runs = {
            "short": PolicyRun(f"fixed {self.short_period_s:g} s", "fixed", self.short_period_s),
            "long": PolicyRun(f"fixed {self.long_period_s:g} s", "fixed", self.long_period_s),
            "adaptive": PolicyRun("adaptive", "adaptive", self.short_period_s, self.max_recovery_s),
        }
        return [runs[name] for name in self.only]


@dataclass
class Kill:
    at_s: float
    back_at_s: float | None = None
    caught_up_at_s: float | None = None
    batch_id: int | None = None
    channel_recovery_s: dict[int, float] = field(default_factory=dict)
    channel_rebuild_s: dict[int, float] = field(default_factory=dict)
    channel_restore_s: dict[int, float] = field(default_factory=dict)
    channel_fold_s: dict[int, float] = field(default_factory=dict)
    channel_folded_entries: dict[int, int] = field(default_factory=dict)
    channel_fixed_s: dict[int, float] = field(default_factory=dict)
    """A fresh worker's start (imports) before its rebuild read anything."""
    predicted_s: float | None = None

    @property
    def restart_s(self) -> float | None:
        return None if self.back_at_s is None else self.back_at_s - self.at_s

    @property
    def recovery_s(self) -> float | None:
        return max(self.channel_recovery_s.values()) if self.channel_recovery_s else None


@dataclass
class PolicyResult:
    run: PolicyRun
    kills: list[Kill]
    batches: list[dict[str, Any]]
    snapshots: list[dict[str, Any]]
    peak_window_s: tuple[float, float]
    p99_per_second_ms: list[float]
    sent_per_second: list[int]
    correctness: dict[str, Any]

    def peak_p99_ms(self) -> float | None:
        """p99 of the per-second p99 probe latency over the peak, disturbed seconds left out."""
        lo, hi = self.peak_window_s
        values = [v for s, v in enumerate(self.p99_per_second_ms) if v > 0 and lo <= s < hi and not self._disturbed(s)]
        return float(np.percentile(values, 99)) if values else None

    def _disturbed(self, second: float) -> bool:
        return any(
            k.at_s <= second + 1 and (k.caught_up_at_s is None or second <= k.caught_up_at_s) for k in self.kills
        )

    def summary(self, bound_s: float) -> dict[str, Any]:
        measured = [k.recovery_s for k in self.kills if k.recovery_s is not None]
        lo, hi = self.peak_window_s
        return {
            "policy": self.run.name,
            "max_recovery_s_measured": max(measured) if measured else None,
            "recoveries": [
                {
                    "kill_at_s": round(k.at_s, 2),
                    "restart_s": k.restart_s,
                    "recovery_s": k.recovery_s,
                    "predicted_s": k.predicted_s,
                    "batch_id": k.batch_id,
                    "channel_recovery_s": k.channel_recovery_s,
                    "caught_up_at_s": k.caught_up_at_s,
                    "channel_rebuild_s": k.channel_rebuild_s,
                    "channel_restore_s": k.channel_restore_s,
                    "channel_fold_s": k.channel_fold_s,
                    "channel_folded_entries": k.channel_folded_entries,
                    "channel_fixed_s": k.channel_fixed_s,
                }
                for k in self.kills
            ],
            "over_bound": sum(1 for r in measured if r > bound_s),
            "peak_p99_ms": self.peak_p99_ms(),
            "snapshots": len(self.snapshots),
            "snapshots_in_peak": len(self._in_peak(self.snapshots)),
            "snapshot_write_s_in_peak": round(
                sum(s.get("write_ms", 0.0) for s in self._in_peak(self.snapshots)) / 1000, 3
            ),
            "correct": self.correctness.get("ok"),
        }

    def _in_peak(self, snapshots: list[dict[str, Any]]) -> list[dict[str, Any]]:
        lo, hi = self.peak_window_s
        return [s for s in snapshots if lo <= s["at_s"] < hi]


def _stream_process(
    config: Path, name: str, root: Path, topic: str, options: CheckpointBenchOptions, run: PolicyRun, log: Path
) -> subprocess.Popen:
    return start_stream_process(
        config,
        log,
        *("--name", name, "--topic", topic, "--root", str(root), "--channels", str(options.channels)),
        *("--trigger", str(options.trigger_seconds), "--max-offsets", str(options.max_offsets)),
        *("--observe-every", "30", *run.stream_args()),
    )


def _wait_for_commit_after(checkpoint: str, batch_id: int, process: subprocess.Popen, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while last_commit(checkpoint) <= batch_id:
        if process.poll() is not None:
            raise RuntimeError(f"the stream exited with {process.returncode} (see its log)")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no batch after {batch_id} committed within {timeout_s:.0f} s")
        time.sleep(0.05)
    return time.time()


def run_policy(
    spark,
    bootstrap: str,
    config: Path,
    folder: Path,
    options: CheckpointBenchOptions,
    run: PolicyRun,
    step: Step,
    kill_times: list[float],
) -> PolicyResult:
    """One policy under the trace with SIGKILLs; its kills, batches, snapshots and figures."""
    from benchmarks.spark_runs import check_results, new_topic
    from pipelines.load import LoadSpec, run_load
    from pipelines.streams.metrics import read_recent
    from pipelines.streams.names import checkpoint_path, metrics_topic, results_table_path

    topic = new_topic(bootstrap, f"bench-ckpt-{run.policy}", 4)
    name = f"ckpt-{run.policy}-{uuid.uuid4().hex[:6]}"
    root = folder / name
    checkpoint = checkpoint_path(root)
    log = folder / f"{name}.log"
    start = lambda: _stream_process(config, name, root, topic, options, run, log)  # noqa: E731
    process = start()
    step(f"{run.name}: starting the stream")
    _wait_for_commit_after(checkpoint, -1, process, options.timeout_s)
    load = LoadSpec(
        profile="esault",
        peak_rate=options.peak_rate,
        speed=options.speed,
        esault_cycles=1,
        duration_s=options.duration_s,
        topic=topic,
        words_per_line=options.words_per_line,
        vocabulary=options.vocabulary,
        distribution="uniform",
        processes=1,
    )
    process = _warm_up(process, start, load, bootstrap, root, checkpoint, topic, options)
    step(f"{run.name}: warmed up (one restart read a snapshot back)")
    reports: list[Any] = []
    loader = threading.Thread(target=lambda: reports.append(run_load(load, bootstrap)), daemon=True)
    started = time.time()
    loader.start()
    kills: list[Kill] = []
    try:
        due = list(kill_times)
        next_kill, lag_checked = due.pop(0) if due else float("inf"), 0.0
        while loader.is_alive():
            elapsed = time.time() - started
            if kills and kills[-1].caught_up_at_s is None and elapsed >= lag_checked + 0.5:
                lag_checked = elapsed
                if _lag(checkpoint, bootstrap, topic) < options.caught_up_lag:
                    kills[-1].caught_up_at_s = elapsed
            # A kill lands mid-batch (the first batch after the restart replays the one in flight),
            # once the previous restart's backlog is caught up (else every kill at the peak would
            # also replay a catch-up batch, and the backlogs would pile up).
            ready = not kills or kills[-1].caught_up_at_s is not None
            if ready and next_kill <= elapsed < options.duration_s - 10 and _batch_running(checkpoint):
                before = last_commit(checkpoint)
                kill = Kill(at_s=elapsed)
                stop_stream_process(process, signal.SIGKILL)
                step(f"{run.name}: killed at {elapsed:.0f} s, restarting")
                process = start()
                kill.back_at_s = _wait_for_commit_after(checkpoint, before, process, options.timeout_s) - started
                kills.append(kill)
                next_kill = max(due.pop(0), kill.back_at_s) if due else float("inf")
                step(f"{run.name}: back after {kill.restart_s:.1f} s")
            time.sleep(0.02)
        loader.join()
        wait_caught_up(checkpoint, bootstrap, topic, options.timeout_s, lambda: process.poll() is None)
        time.sleep(2)
    finally:
        stop_stream_process(process)
    metrics = sorted(read_recent(bootstrap, metrics_topic(name), limit=50_000), key=lambda m: m.wall_time)
    _attach_recoveries(kills, metrics, started)
    correctness = check_results(spark, results_table_path(root), bootstrap, topic).to_dict()
    report = reports[0] if reports else None
    step(f"{run.name}: checked ({'correct' if correctness.get('ok') else 'WRONG'})")
    peak_start = 20.0 + 20.0  # warm-up at the valley, then the rise in two 10 s steps
    return PolicyResult(
        run=run,
        kills=kills,
        batches=[_batch_point(m, started) for m in metrics],
        snapshots=[{"at_s": round(m.wall_time - started, 2), **asdict(s)} for m in metrics for s in m.snapshots],
        peak_window_s=(peak_start / options.speed, (peak_start + 80.0) / options.speed),
        p99_per_second_ms=_p99_per_second(metrics, started, int(options.duration_s)),
        sent_per_second=list(report.per_second_sent) if report is not None else [],
        correctness=correctness,
    )


def _warm_up(
    process: subprocess.Popen,
    start: Callable[[], subprocess.Popen],
    load: Any,
    bootstrap: str,
    root: Path,
    checkpoint: str,
    topic: str,
    options: CheckpointBenchOptions,
) -> subprocess.Popen:
    """Before the trace: load the vocabulary once, wait for a snapshot, load it again (changelogs
    after that snapshot), SIGKILL and restart. The restarted driver's policies learn the restore
    *and the fold* rate from that first rebuild, as they would after any earlier restart of a
    long-lived stream (the rates are kept in its elastic folder). Without the second load the
    rebuild folded nothing, and until the trace's first kill the policies predicted the fold from
    the commits' rate, about half as fast (BENCHMARKS.md §8, runs C and E)."""
    from pipelines.load import preload
    from pipelines.streams.names import elastic_path

    lines = max(1, options.vocabulary // options.words_per_line)
    preload(load, bootstrap, lines)
    snapshots = Path(elastic_path(str(root))) / "channels"
    deadline = time.monotonic() + options.timeout_s
    while _lag(checkpoint, bootstrap, topic) > 0 or not list(snapshots.glob("channel=*/snapshot/*.parquet")):
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError("the warm-up saw no snapshot (see the stream's log)")
        time.sleep(0.2)
    preload(load, bootstrap, lines * WARM_UP_FOLD_LOADS)
    wait_caught_up(checkpoint, bootstrap, topic, options.timeout_s, lambda: process.poll() is None)
    before = last_commit(checkpoint)
    stop_stream_process(process, signal.SIGKILL)
    process = start()
    _wait_for_commit_after(checkpoint, before, process, options.timeout_s)
    return process


def _lag(checkpoint: str, bootstrap: str, topic: str) -> int:
    """Records of the topic the stream has not committed yet."""
    from pipelines.kafka_topics import end_offsets
    from pipelines.streams.metrics import checkpoint_offsets, kafka_lag

    return sum(kafka_lag(end_offsets(bootstrap, topic), checkpoint_offsets(checkpoint, topic)).values())


def _batch_running(checkpoint: str) -> bool:
    """A batch is planned (in the offsets log) and not yet committed."""
    from elasticity.state import Location
    from pipelines.streams.metrics import checkpoint_batch_ids

    planned = checkpoint_batch_ids(Location.of(checkpoint).child("offsets"))
    return bool(planned) and max(planned) > last_commit(checkpoint)


def _attach_recoveries(kills: list[Kill], metrics: list[Any], started: float) -> None:
    """Each kill's first batch after the restart, per channel: its task time (rebuild + replay)
    and its rebuild; and the recovery the policy predicted in the last batch before the kill."""
    for kill in kills:
        before = [m for m in metrics if m.wall_time - started < kill.at_s]
        after = [m for m in metrics if kill.back_at_s is not None and m.wall_time - started >= kill.at_s]
        if before:
            predicted = [c.predicted_recovery_s for c in before[-1].per_channel if c.predicted_recovery_s is not None]
            kill.predicted_s = max(predicted) if predicted else None
        if not after:
            continue
        first = after[0]
        kill.batch_id = first.batch_id
        for channel in first.per_channel:
            kill.channel_recovery_s[channel.channel] = channel.proc_ms / 1000
            rebuild = channel.rebuild
            kill.channel_rebuild_s[channel.channel] = channel.open_ms / 1000
            if rebuild is not None:
                kill.channel_restore_s[channel.channel] = rebuild.restore_ms / 1000
                kill.channel_fold_s[channel.channel] = rebuild.fold_ms / 1000
                kill.channel_folded_entries[channel.channel] = rebuild.changelog_entries
                if rebuild.fixed_ms is not None:
                    kill.channel_fixed_s[channel.channel] = rebuild.fixed_ms / 1000


def _batch_point(metrics: Any, started: float) -> dict[str, Any]:
    predicted = [c.predicted_recovery_s for c in metrics.per_channel if c.predicted_recovery_s is not None]
    return {
        "batch_id": metrics.batch_id,
        "end_s": round(metrics.wall_time - started, 3),
        "duration_s": metrics.batch_ms / 1000,
        "records": metrics.input_records,
        "predicted_recovery_s": max(predicted) if predicted else None,
        "rules": sorted({c.snapshot_rule for c in metrics.per_channel if c.snapshot_rule}),
    }


def _p99_per_second(metrics: list[Any], started: float, seconds: int) -> list[float]:
    """p99 probe latency (ms) of the probes that came back in each second (0: none came back)."""
    buckets: list[list[float]] = [[] for _ in range(seconds)]
    for m in metrics:
        second = int(m.wall_time - started)
        if 0 <= second < seconds:
            buckets[second].extend(m.probe_latencies)
    return [float(np.percentile(b, 99)) if b else 0.0 for b in buckets]


def run_checkpoint_benchmark(
    spark, bootstrap: str, config: Path, folder: Path, options: CheckpointBenchOptions, step: Step
) -> dict[str, Any]:
    """Every policy in turn under the same trace, `repetitions` rounds; the JSON document of the run."""
    from benchmarks.spark_runs import machine

    rounds = []
    for number in range(options.repetitions):
        label = f"round {number + 1}/{options.repetitions}: " if options.repetitions > 1 else ""
        labelled: Step = lambda d, label=label: step(label + d)  # type: ignore[misc]  # noqa: E731
        kills = options.kill_times(number)
        rounds.append(
            [run_policy(spark, bootstrap, config, folder, options, run, labelled, kills) for run in options.policies()]
        )
    return {**rounds_document(rounds, asdict(options)), "machine": machine()}


MEDIAN_FIGURES = (
    "max_recovery_s_measured",
    "over_bound",
    "peak_p99_ms",
    "snapshots",
    "snapshots_in_peak",
    "snapshot_write_s_in_peak",
)
"""The per-policy figures reported as the median over rounds, with their spread."""


def rounds_document(rounds: list[list[PolicyResult]], options: dict[str, Any]) -> dict[str, Any]:
    """The JSON document of several rounds: per policy the median of each figure (the keys of a
    one-round summary), every round's recoveries, and the spread; the last round's series."""
    documents = [run_summary_document(results, options) for results in rounds]
    policies = {}
    for name in documents[-1]["policies"]:
        per_round = [d["policies"][name] for d in documents if name in d["policies"]]
        spreads = {key: spread([r[key] for r in per_round]) for key in MEDIAN_FIGURES}
        median = {key: figure["median"] for key, figure in spreads.items()}
        policies[name] = {
            **per_round[-1],
            **median,
            "recoveries": [{**rec, "round": i + 1} for i, r in enumerate(per_round) for rec in r["recoveries"]],
            "correct": all(r["correct"] for r in per_round),
            "over_bound_total": sum(r["over_bound"] for r in per_round),
            "rounds": len(per_round),
            "spread": spreads,
        }
    return {
        "options": options,
        "policies": policies,
        "rounds": [d["policies"] for d in documents],
        "series": documents[-1]["series"],
        "correct": all(d["correct"] for d in documents),
    }


def run_summary_document(results: list[PolicyResult], options: dict[str, Any]) -> dict[str, Any]:
    """The JSON document of the policies' results (`options` as the benchmark ran them)."""
    bound = options["max_recovery_s"]
    return {
        "options": options,
        "policies": {r.run.name: r.summary(bound) for r in results},
        "series": {
            r.run.name: {
                "batches": r.batches,
                "snapshots": r.snapshots,
                "p99_per_second_ms": r.p99_per_second_ms,
                "sent_per_second": r.sent_per_second,
                "kills": [asdict(k) for k in r.kills],
                "peak_window_s": r.peak_window_s,
            }
            for r in results
        },
        "correct": all(r.correctness.get("ok") for r in results),
    }


def write_json(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=str))
