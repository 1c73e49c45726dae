"""`esp soak`'s engine: a word-count stream on the real stack, killed and rescaled at seeded
random times, then checked against the input topic itself.

The soak owns everything it touches: a private KRaft broker, a stream run by `esp stream run`
in its own process group, a producer with a seeded varying load. A seeded schedule picks one
fault at a time (`FAULTS`), waits a random gap, and records what it did. After the last fault
the stream catches up and the checks run:

- results equal the oracle (every word counted in the input topic, by the same batch code
  the tests use): `lost` words counted too low, `doubled` words counted too high;
- every key stored once, by its owner in the committed layout; no channel outside it keeps
  state; no migration pending; every migration journal ended (complete or rolled back);
- every rescale request answered exactly once;
- the second driver was refused each time, naming the holder.

With `admission_high_s` set every stream runs with admission control on (seed 004), and the
report says what it did per stream (`admission`: capped batches, cap changes, rules), read from
the streams' metrics topics as they are written.

Each violation is one sentence in the report's `violations`. What the soak does not cover yet is
said in RELIABILITY.md.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from benchmarks.soak_admission import AdmissionLog
from benchmarks.soak_dagster import ENDED, ControlRoom
from benchmarks.soak_jobs import JOBS, Expected, SoakJob
from benchmarks.soak_resources import (
    ResourceSample,
    Trend,
    WatchedFolders,
    endurance_figures,
    growth_violations,
    sample_resources,
)
from benchmarks.soak_topics import TopicTail, limit_retention
from orchestration.stack.kafka_broker import KafkaBroker
from pipelines.streams.names import checkpoint_path, control_path, elastic_path, metrics_topic

FAULTS = (
    "driver",
    "driver_mid_batch_with_request",
    "python_worker",
    "migration_phase",
    "snapshot_write",
    "broker",
    "second_driver",
    "dagster_daemon",
    "code_server",
    "rescale",
)
KILL_POINTS = tuple(f for f in FAULTS if f != "rescale")
# Faults that need the soak's Dagster (`--no-dagster` leaves them out).
DAGSTER_FAULTS = ("dagster_daemon", "code_server")
# The migration phases a kill can land after (each journal entry is published before the phase's work).
MIGRATION_PHASES = ("planned", "donating", "donated", "collecting", "collected", "committed")


@dataclass(frozen=True)
class SoakOptions:
    minutes: float
    seed: int
    folder: Path
    bootstrap: str
    config: Path
    # The pipelines run side by side, as Dagster's catalog knows them (names, topics), so the
    # soak's control room (resize runs, the sensor) acts on the very stream the soak runs: the first.
    jobs: tuple[str, ...] = ("wordcount", "adclicks")
    min_gap_s: float = 4.0
    max_gap_s: float = 20.0
    peak_lines_per_s: float = 400.0
    # The run goes on past `minutes` until this many faults were drawn: on a busy host each fault
    # (a restart, a wait for a migration phase) takes longer, and a short run would see too few.
    min_faults: int = 0
    faults: tuple[str, ...] = FAULTS
    # Besides the drawn faults, a manual rescale is requested this often (a random gap in the
    # range), so a run rescales often enough to meet kills mid-migration and mid-replay.
    rescale_gap_s: tuple[float, float] = (25.0, 60.0)
    # A Dagster control room (webserver, daemon, code server; the elasticity sensor running)
    # launches resize runs beside the soak's direct requests, and is killed by the Dagster faults.
    dagster: bool = True
    # Every topic's retention once the streams run (None: keep everything). An endurance run
    # sets it so the broker's log is bounded; the oracle then comes from tailing the topics.
    retention_s: float | None = None
    # Admission control's watermarks (batch seconds) for every stream the soak starts, passed to
    # `esp stream run --admission-high/--admission-low` (None: admission off; a low one without a
    # high one is refused by `esp stream run`).
    admission_high_s: float | None = None
    admission_low_s: float | None = None

    @property
    def admission(self) -> bool:
        return self.admission_high_s is not None

    def to_json(self) -> dict[str, object]:
        """The options a reader of the report needs (not the run's temporary folder, config or broker)."""
        kept = {k: v for k, v in asdict(self).items() if k not in ("folder", "bootstrap", "config")}
        return {**kept, "kills": self.kills, "endurance": self.endurance, "admission": self.admission}

    @property
    def kills(self) -> bool:
        return any(f in KILL_POINTS for f in self.faults)

    @property
    def endurance(self) -> bool:
        """No kills and a bounded broker log: every resource is judged flat after one retention cycle."""
        return not self.kills and self.retention_s is not None


@dataclass
class Event:
    at_s: float
    kind: str
    detail: str


@dataclass
class SoakReport:
    seed: int
    minutes: float
    events: list[Event] = field(default_factory=list)
    lag: list[tuple[float, int]] = field(default_factory=list)
    channels: list[tuple[float, int]] = field(default_factory=list)
    resources: list[ResourceSample] = field(default_factory=list)
    requests: dict[str, str] = field(default_factory=dict)
    lost: int = 0
    doubled: int = 0
    keys_checked: dict[str, int] = field(default_factory=dict)
    late_counted: dict[str, int] = field(default_factory=dict)
    migrations_committed: int = 0
    dagster_runs: dict[str, int] = field(default_factory=dict)
    control_room_restarts: int = 0
    dead_letters_expected: int = 0
    dead_letters_found: int = 0
    violations: list[str] = field(default_factory=list)
    retention_s: float | None = None
    # Endurance runs: when the judged window starts (the first retention cycle over) and each
    # figure's trend in it.
    settle_s: float | None = None
    trends: list[Trend] = field(default_factory=list)
    options: dict[str, object] = field(default_factory=dict)
    # Per stream, what admission control did (None: admission off).
    admission: dict[str, dict[str, object]] | None = None

    @property
    def kills(self) -> Counter[str]:
        return Counter(e.kind for e in self.events if e.kind in KILL_POINTS)

    @property
    def rescales(self) -> int:
        """Migrations that committed, whoever asked (the soak, a resize run, the sensor)."""
        return self.migrations_committed

    def to_json(self) -> dict[str, object]:
        return {
            "rescales": self.rescales,
            "kills": sum(self.kills.values()),
            "kills_by_point": dict(self.kills),
            "lost": self.lost,
            "doubled": self.doubled,
            "violations": self.violations,
            "keys_checked": self.keys_checked,
            "late_counted": self.late_counted,
            "dagster_runs": self.dagster_runs,
            "control_room_restarts": self.control_room_restarts,
            "dead_letters_expected": self.dead_letters_expected,
            "dead_letters_found": self.dead_letters_found,
            "requests": self.requests,
            "seed": self.seed,
            "minutes": self.minutes,
            "retention_s": self.retention_s,
            "options": self.options,
            "admission": self.admission,
            "endurance": {"settle_s": self.settle_s, "trends": [asdict(t) for t in self.trends]},
            "events": [asdict(e) for e in self.events],
            "resources": [asdict(r) for r in self.resources],
        }


class BrokerHandle:
    """The soak's private KRaft broker, which it kills and restarts."""

    def __init__(self, broker: KafkaBroker) -> None:
        self.broker = broker

    def kill(self) -> None:
        pid = self.broker.running_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
                psutil.Process(pid).wait(timeout=30)
            except (ProcessLookupError, psutil.NoSuchProcess):
                pass

    def start(self) -> None:
        self.broker.up()

    def answers(self) -> bool:
        return self.broker.status().answering

    @property
    def data_dir(self) -> Path:
        return self.broker.paths.data_dir


class StreamProcess:
    """One `esp stream run` of one of the soak's streams, in its own process group."""

    def __init__(self, options: SoakOptions, job: SoakJob, log: Path) -> None:
        self.options, self.job, self.log = options, job, log
        self.topic = job.topic
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def root(self) -> Path:
        return self.options.folder / "run" / "streams" / self.job.name

    def command(self) -> list[str]:
        esp = str(Path(sys.executable).parent / "esp")
        return [
            *(esp, "stream", "run", "--config", str(self.options.config), "--name", self.job.name),
            *("--job", self.job.job, "--topic", self.topic),
            *("--root", str(self.root), "--channels", "2", "--trigger", "0.5"),
            *("--max-offsets", "2000", "--service-ms", "0.2", "--observe-every", "30"),
            *self.retention_options(),
            *self.admission_options(),
        ]

    def retention_options(self) -> tuple[str, ...]:
        """An endurance run keeps the bronze archive as long as the topics (default: 7 days)."""
        if self.options.retention_s is None:
            return ()
        return ("--bronze-retention-days", f"{self.options.retention_s / 86_400:.6f}")

    def admission_options(self) -> tuple[str, ...]:
        """Admission control's watermarks when the soak runs with it (default: off, no flag)."""
        flags: tuple[str, ...] = ()
        if self.options.admission_high_s is not None:
            flags += ("--admission-high", str(self.options.admission_high_s))
        if self.options.admission_low_s is not None:
            flags += ("--admission-low", str(self.options.admission_low_s))
        return flags

    def start(self) -> subprocess.Popen[bytes]:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self.process

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # stragglers (Python workers) of a graceful stop
        except ProcessLookupError:
            pass

    def python_workers(self) -> list[psutil.Process]:
        if not self.alive() or self.process is None:
            return []
        children = psutil.Process(self.process.pid).children(recursive=True)
        return [c for c in children if "pyspark.worker" in " ".join(_cmdline(c)) and c.ppid() != 1]


def _tree(process: subprocess.Popen[bytes] | None) -> list[psutil.Process]:
    """A process and all its descendants ([] once it is gone)."""
    if process is None:
        return []
    try:
        root = psutil.Process(process.pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def batch_ids(checkpoint: Path, folder: str) -> list[int]:
    path = checkpoint / folder
    return sorted(int(p.name) for p in path.glob("[0-9]*")) if path.is_dir() else []


def _listing(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []


def _ended(phases: list[str]) -> bool:
    return any(p in {"complete", "rolled_back", "failed"} for p in phases)


def _journal_phases(journal: Path) -> list[str]:
    try:
        names = sorted(p.name for p in journal.iterdir() if not p.name.startswith("."))
    except FileNotFoundError:
        return []
    return [name.split("-", 1)[1].removesuffix(".json") for name in names]


def channels_holding(elastic: Path, batch_id: int) -> bool:
    from elasticity.state.records import Version

    for changelog in (elastic / "channels").glob("channel=*/changelog"):
        if any(Version.parse(p.name).batch >= batch_id for p in changelog.glob("b*.arrow")):
            return True
    return False


class Load:
    """A seeded varying load of one job's records; the input topic itself is the ledger."""

    def __init__(self, bootstrap: str, job: SoakJob, seed: int, peak: float) -> None:
        self.bootstrap, self.job, self.peak = bootstrap, job, peak
        self.random = random.Random(seed)
        self.stop = threading.Event()
        self.sent = 0
        self.failed = 0
        self.thread = threading.Thread(target=self._run, name=f"soak-load-{job.name}", daemon=True)

    def _run(self) -> None:
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=20, acks="all", retries=0)
        started = time.monotonic()
        while not self.stop.is_set():
            phase = (time.monotonic() - started) / 60.0
            rate = self.peak * (0.35 + 0.65 * abs(((phase * 0.9) % 2.0) - 1.0))
            try:
                for _ in range(max(1, int(rate / 10))):
                    key, value = self.job.record(self.random)
                    future = producer.send(self.job.topic, key=key, value=value)
                    future.add_errback(self._count_failure)
                    self.sent += 1
            except KafkaError:  # the broker is down on purpose: the load waits for it
                self.failed += 1
                time.sleep(1.0)
            time.sleep(0.1)
        try:
            producer.flush(timeout=30)
        except KafkaError:
            self.failed += 1
        producer.close(timeout=30)

    def _count_failure(self, _error: Exception) -> None:
        # A record the broker never took is in no one's ledger: the oracle reads the topic.
        self.failed += 1


class Soak:
    """One soak run: faults on a schedule, a monitor that restarts a dead stream, then checks."""

    def __init__(self, options: SoakOptions, broker: BrokerHandle, progress: Callable[[str], None]) -> None:
        self.options, self.broker, self.progress = options, broker, progress
        self.random = random.Random(options.seed)
        self.report = SoakReport(
            seed=options.seed, minutes=options.minutes, retention_s=options.retention_s, options=options.to_json()
        )
        self.streams = [StreamProcess(options, JOBS[j], options.folder / f"{j}.log") for j in options.jobs]
        # The stream the current fault acts on (the first, the control room's, unless drawn otherwise).
        self.stream = self.streams[0]
        self.request_streams: dict[str, StreamProcess] = {}
        self._bag: list[str] = []
        self.started = time.monotonic()
        self.keep_running = threading.Event()
        self.monitor_stop = threading.Event()
        first = self.streams[0].job
        self.room = (
            ControlRoom(options.folder, options.config, first.name, first.topic, run_retention_s=options.retention_s)
            if options.dagster
            else None
        )
        # The oracle: each stream's input and dead letters, read while they are written.
        self.expected = {s.job.name: Expected() for s in self.streams}
        self.dead_letters: dict[str, dict[str, str]] = {s.job.name: {} for s in self.streams}
        self.tails = [tail for s in self.streams for tail in self._tails(s)]
        # With admission on, each stream's metrics topic too: what admission control did.
        self.admission_logs = {s.job.name: AdmissionLog() for s in self.streams} if options.admission else {}
        self.metrics_tails = {
            name: TopicTail(options.bootstrap, metrics_topic(name), lambda record, log=log: log.take(record.value))
            for name, log in self.admission_logs.items()
        }
        # stream -> migration folder -> the request it committed ("" for none), as observed.
        self.committed_migrations: dict[str, dict[str, str]] = {}
        # request -> its answer's status, as observed (a stream keeps only its newest answers).
        self.answers: dict[str, str] = {}

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> SoakReport:
        if self.room is not None:
            self.progress("starting Dagster")
            self.room.start()
        try:
            return self._run()
        finally:
            if self.room is not None:
                self.room.stop()

    def _tails(self, stream: StreamProcess) -> tuple[TopicTail, TopicTail]:
        from pipelines.probes import PROBE_KAFKA_KEY
        from pipelines.streams.names import dead_letter_topic

        expected, letters = self.expected[stream.job.name], self.dead_letters[stream.job.name]

        def take_input(record) -> None:
            if record.key != PROBE_KAFKA_KEY:
                stream.job.expect(
                    record.key, record.value, f"{record.topic}:{record.partition}:{record.offset}", expected
                )

        def take_letter(record) -> None:
            letter = json.loads(record.value)
            position = f"{letter['source_topic']}:{letter['source_partition']}:{letter['source_offset']}"
            letters[position] = letter.get("reason") or ""

        bootstrap = self.options.bootstrap
        return TopicTail(bootstrap, stream.topic, take_input), TopicTail(
            bootstrap, dead_letter_topic(stream.job.name), take_letter
        )

    def _run(self) -> SoakReport:
        tails = [*self.tails, *self.metrics_tails.values()]
        for tail in tails:
            tail.start()
        try:
            return self._soak()
        finally:
            for tail in tails:
                tail.stop()
            self._report_admission()

    def _report_admission(self) -> None:
        """What admission control did per stream, from every metrics record read (tails stopped)."""
        if not self.options.admission:
            return
        self.report.admission = {}
        for name, log in self.admission_logs.items():
            tail = self.metrics_tails[name]
            failure = None if tail.failure is None else repr(tail.failure)
            self.report.admission[name] = {**log.summary(), "metrics_read_error": failure}

    def _soak(self) -> SoakReport:
        loads = [
            Load(self.options.bootstrap, s.job, self.options.seed + i, self.options.peak_lines_per_s)
            for i, s in enumerate(self.streams)
        ]
        for load in loads:
            load.thread.start()
        self.keep_running.set()
        for stream in self.streams:
            stream.start()
        monitor = threading.Thread(target=self._monitor, name="soak-monitor", daemon=True)
        monitor.start()
        try:
            self._wait_for_first_batch()
            if self.options.retention_s is not None:
                # Every topic exists now (the streams create their outputs' at start).
                limit_retention(self.options.bootstrap, self.options.retention_s)
                self._event("retention", f"every topic keeps {self.options.retention_s:.0f} s")
                # Judged once the oldest data has been deleted twice over (a closed segment
                # waits for the broker's 5-minute retention check).
                self.report.settle_s = self._now() + 2 * self.options.retention_s
            # The minutes of faults start once every stream runs (Dagster and Spark start slowly on 2 cores).
            deadline = time.monotonic() + self.options.minutes * 60
            next_rescale = time.monotonic() + self.random.uniform(*self.options.rescale_gap_s)
            drawn = 0
            while time.monotonic() < deadline or drawn < self.options.min_faults:
                self._sleep(self.random.uniform(self.options.min_gap_s, self.options.max_gap_s))
                if time.monotonic() >= deadline and drawn >= self.options.min_faults:
                    break
                if "rescale" in self.options.faults and time.monotonic() >= next_rescale:
                    self._rescale_now()
                    next_rescale = time.monotonic() + self.random.uniform(*self.options.rescale_gap_s)
                fault = self._next_fault()
                drawn += 1
                # Dagster acts on the first stream only; other faults hit any of them.
                self.stream = self.streams[0] if fault in DAGSTER_FAULTS else self.random.choice(self.streams)
                self.progress(f"{self._now():6.0f} s: {fault} ({self.stream.job.name})")
                getattr(self, f"_fault_{fault}")()
        finally:
            for load in loads:
                load.stop.set()
            for load in loads:
                load.thread.join(timeout=60)
        self._catch_up()
        self._check_runs()
        self.keep_running.clear()
        self.monitor_stop.set()
        monitor.join(timeout=10)
        for stream in self.streams:
            stream.kill(signal.SIGTERM)
        for stream in self.streams:
            self.stream = stream
            self._check_state()
        return self.report

    def _next_fault(self) -> str:
        """The faults in seeded shuffled rounds: every kill point comes up once per round, so
        even a short run spreads its kills over all of them."""
        if not self._bag:
            self._bag = list(self.options.faults)
            self.random.shuffle(self._bag)
        return self._bag.pop()

    def _now(self) -> float:
        return time.monotonic() - self.started

    def _event(self, kind: str, detail: str) -> None:
        self.report.events.append(Event(round(self._now(), 2), kind, f"{self.stream.job.name}: {detail}"))

    def _sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def _monitor(self) -> None:
        """Restart a stream that died (the Dagster supervisor's job in production); sample lag and resources."""
        while not self.monitor_stop.wait(2.0):
            for stream in self.streams:
                if self.keep_running.is_set() and not stream.alive():
                    stream.kill()
                    stream.start()
            lag = self._lag()
            if lag is not None:
                self.report.lag.append((round(self._now(), 1), lag))
            layout = self._committed_layout(self.streams[0])
            if layout is not None:
                self.report.channels.append((round(self._now(), 1), layout.n_channels))
            if all(stream.alive() for stream in self.streams):
                self.report.resources.append(self._sample_resources())
            for stream in self.streams:
                self._observe_journals(stream)
                self._observe_answers(stream)

    def _lag(self) -> int | None:
        """Records not yet consumed, over every stream (None while the broker is down)."""
        from pipelines.kafka_topics import end_offsets
        from pipelines.streams.metrics import checkpoint_offsets

        total = 0
        for stream in self.streams:
            try:
                end = end_offsets(self.options.bootstrap, stream.topic)
                done = checkpoint_offsets(checkpoint_path(stream.root), stream.topic)
            except Exception:  # the broker may be down on purpose; the lag is then unknown
                return None
            total += sum(end.values()) - sum(done.values())
        return total

    def _sample_resources(self) -> ResourceSample:
        processes = [p for stream in self.streams for p in _tree(stream.process)]
        folders = WatchedFolders(
            stream_roots=tuple(stream.root for stream in self.streams),
            broker_data=self.broker.data_dir,
            dagster_home=self.options.folder / "run" / "dagster" if self.room is not None else None,
        )
        return sample_resources(self._now(), processes, folders)

    def _wait_for_first_batch(self, timeout_s: float = 300) -> None:
        deadline = time.monotonic() + timeout_s
        for stream in self.streams:
            while not batch_ids(Path(checkpoint_path(stream.root)), "commits"):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"stream {stream.job.name} committed no batch in {timeout_s:.0f} s; see {stream.log}"
                    )
                time.sleep(0.5)

    # -- faults ------------------------------------------------------------------------------

    def _fault_driver(self) -> None:
        self._sleep(self.random.uniform(0, 3))
        self.stream.kill()
        self._event("driver", "SIGKILL of the stream's process group at a random time")
        self.stream.start()

    def _fault_driver_mid_batch_with_request(self) -> None:
        checkpoint, elastic = Path(checkpoint_path(self.stream.root)), Path(elastic_path(self.stream.root))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            planned, committed = batch_ids(checkpoint, "offsets"), batch_ids(checkpoint, "commits")
            in_flight = planned[-1] if planned and (not committed or planned[-1] > committed[-1]) else None
            if in_flight is not None and channels_holding(elastic, in_flight) and self.stream.alive():
                self.stream.kill()
                target = self._request_rescale()
                self._event("driver_mid_batch_with_request", f"batch {in_flight} held by a channel; {target} waiting")
                self.stream.start()
                return
            time.sleep(0.02)
        self._fault_driver()  # no such window came: a plain kill instead

    def _fault_python_worker(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            workers = self.stream.python_workers()
            if workers:
                victim = self.random.choice(workers)
                try:
                    victim.send_signal(signal.SIGKILL)
                except psutil.NoSuchProcess:
                    continue
                self._event("python_worker", f"SIGKILL of Python worker {victim.pid} during the stage")
                return
            time.sleep(0.05)

    def _fault_migration_phase(self) -> None:
        """Request a rescale and SIGKILL the driver as soon as its migration journals a chosen phase.

        The kill lands a little after that phase was recorded, maybe after later ones too: the
        event names the last phase the journal holds after the kill, which is the one that counts."""
        phase = self.random.choice(MIGRATION_PHASES)
        journals = Path(elastic_path(self.stream.root)) / "migrations"
        known = {p.name for p in journals.glob("epoch=*")}
        target = self._request_rescale()
        if not target:
            return
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.stream.alive():
            fresh = [journals / name / "journal" for name in _listing(journals) if name not in known]
            if not fresh:
                time.sleep(0.005)
                continue
            journal = fresh[0]
            reached: list[str] = []
            while time.monotonic() < deadline and self.stream.alive():
                reached = _journal_phases(journal)
                if phase in reached or _ended(reached):
                    break
                time.sleep(0.0002)  # near-busy: phases of a small migration are milliseconds apart
            if phase in reached:
                self.stream.kill()
                self._event("migration_phase", f"{target}: killed after {_journal_phases(journal)[-1]!r}")
                self.stream.start()
                return
            known.add(journal.parent.name)  # rolled back or done before the phase: wait for another
        self._event("rescale", f"{target} (its migration reached no {phase!r} to kill at)")

    def _fault_snapshot_write(self) -> None:
        """SIGKILL the stream while its driver writes a channel's snapshot (seen as a temporary snapshot
        file; `pipelines.streams.snapshots` writes them beside the running batches)."""
        elastic = Path(elastic_path(self.stream.root))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and self.stream.alive():
            writing = [p for p in elastic.glob("channels/channel=*/snapshot/.tmp-*")]
            if writing:
                self.stream.kill()
                self._event("snapshot_write", f"SIGKILL while {writing[0].parent.parent.name} wrote {writing[0].name}")
                self.stream.start()
                return
            time.sleep(0.001)
        if self.stream.alive():
            self._fault_driver()  # no snapshot write was caught in time: a plain kill instead

    def _fault_broker(self) -> None:
        down_s = self.random.uniform(5, 30)
        self.broker.kill()
        self._event("broker", f"SIGKILL of the broker, restarted after {down_s:.0f} s")
        self._sleep(down_s)
        self.broker.start()

    def _first_holds_the_lease(self, timeout_s: float = 90) -> bool:
        """Whether the running stream holds the lease (it takes it once its Spark session is up)."""
        from elasticity.lease import read_holder

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            holder = read_holder(Path(elastic_path(self.stream.root)))
            process = self.stream.process
            if process is not None and self.stream.alive() and holder is not None and holder.pid == process.pid:
                return True
            time.sleep(0.5)
        return False

    def _fault_second_driver(self) -> None:
        # Only a second driver beside a first that holds the lease must be refused: one started
        # while the monitor restarts a dead first driver may win the lease and rightly run alone.
        if not self._first_holds_the_lease():
            return
        second = StreamProcess(self.options, self.stream.job, self.options.folder / "second-driver.log")
        process = second.start()
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            second.kill()
            if self.stream.alive():
                self.report.violations.append(f"a second driver ran for 120 s beside the first ({second.log})")
        else:
            refused = process.returncode != 0 and "held by" in second.log.read_text()[-4000:]
            if not refused and self.stream.alive():
                self.report.violations.append(
                    f"a second driver was not refused with the holder named (exit {process.returncode}, {second.log})"
                )
        second.kill()
        self._event("second_driver", "a second `esp stream run` on the same stream")

    def _fault_rescale(self) -> None:
        target = self._request_rescale()
        if target:
            self._event("rescale", target)

    def _rescale_now(self) -> None:
        """A manual rescale: every other one through a Dagster resize run, as a user would click it."""
        if self.room is None or self.random.random() < 0.5:
            self._fault_rescale()
            return
        run_id = self._launch_resize()
        if run_id:
            self._event("rescale", f"resize run {run_id[:8]} launched through Dagster")

    def _launch_resize(self) -> str | None:
        from pipelines.streams.control import ControlChannel

        first = self.streams[0]  # the control room's stream
        layout = self._committed_layout(first)
        if self.room is None or layout is None or ControlChannel(control_path(first.root)).take_request():
            return None
        target = self._random_target(layout)
        try:
            return self.room.launch_resize(target.model_dump(), "soak (Dagster)")
        except (OSError, RuntimeError) as error:  # a control room being restarted: no launch this time
            self._event("rescale", f"resize run not launched: {error}")
            return None

    def _fault_dagster_daemon(self) -> None:
        """SIGKILL the Dagster daemon while a resize run is queued or starting (it dequeues and launches runs)."""
        self._kill_dagster_part("dagster_daemon", "the daemon", wanted=frozenset({"QUEUED", "STARTING", "STARTED"}))

    def _fault_code_server(self) -> None:
        """SIGKILL the code server (the gRPC server that launched the run's worker) while a resize run runs."""
        self._kill_dagster_part("code_server", "the code server", wanted=frozenset({"STARTED"}))

    def _kill_dagster_part(self, kind: str, part: str, wanted: frozenset[str]) -> None:
        if self.room is None:
            return
        run_id = self._launch_resize()
        status = self.room.wait_for_status(run_id, wanted | ENDED, 90) if run_id else "no run"
        killed = self.room.kill_daemon() if kind == "dagster_daemon" else self.room.kill_code_server()
        self._event(kind, f"SIGKILL of {part} (pid {killed}) while resize run {(run_id or '-')[:8]} was {status}")
        time.sleep(2)
        if self.room.ensure_serving():
            self.report.control_room_restarts += 1

    # -- rescale requests --------------------------------------------------------------------

    def _committed_layout(self, stream: StreamProcess | None = None):  # -> Layout | None
        from elasticity.migration import LayoutRegistry, RegistryError
        from elasticity.state import Location

        try:
            return LayoutRegistry(Location.of(elastic_path((stream or self.stream).root))).committed()
        except (RegistryError, FileNotFoundError, ValueError):
            return None

    def _request_rescale(self) -> str:
        from pipelines.streams.control import ControlChannel, RescaleRequest

        control = ControlChannel(control_path(self.stream.root))
        layout = self._committed_layout()
        if layout is None or control.take_request() is not None:
            return ""
        target = self._random_target(layout)
        # Planned here, as the resizing asset and `esp stream rescale` do; every third request
        # carries the target alone, as a hand-written one would, and the stream plans it.
        planned = target.next_layout(layout).renumbered(layout.epoch + 1) if self.random.random() < 2 / 3 else None
        request = RescaleRequest(target=target, reason="soak", base_epoch=layout.epoch, planned=planned)
        control.request(request)
        self.report.requests[request.request_id] = "waiting"
        self.request_streams[request.request_id] = self.stream
        return f"{target.op} {target.channels if target.op == 'scale_to' else target.channel}"

    def _random_target(self, layout):  # -> RescaleTarget
        from pipelines.streams.control import RescaleTarget

        channels = list(layout.channels)
        options = [RescaleTarget(op="scale_to", channels=n) for n in range(1, 7) if n != len(channels)]
        options += [RescaleTarget(op="split", channel=c) for c in channels if len(channels) < 6]
        options += [RescaleTarget(op="merge", channel=c) for c in channels if len(channels) > 1]
        return self.random.choice(options)

    # -- the end -----------------------------------------------------------------------------

    def _catch_up(self, timeout_s: float = 900) -> None:
        """Wait until every stream consumed its topic to the end and answered its waiting request."""
        from pipelines.kafka_topics import end_offsets
        from pipelines.streams.control import REQUEST
        from pipelines.streams.metrics import checkpoint_offsets

        self.progress("catching up")
        if not self.broker.answers():
            self.broker.start()
        deadline = time.monotonic() + timeout_s
        for stream in self.streams:
            target = end_offsets(self.options.bootstrap, stream.topic)
            while time.monotonic() < deadline:
                done = checkpoint_offsets(checkpoint_path(stream.root), stream.topic)
                caught_up = all(done.get(p, -1) >= end for p, end in target.items())
                if caught_up and not (Path(control_path(stream.root)) / REQUEST).exists():
                    break
                time.sleep(1.0)
            else:
                self.report.violations.append(f"{stream.job.name} did not catch up within {timeout_s:.0f} s")

    def _check_state(self) -> None:
        """The checks of the stream `self.stream`: answers, journals, results, state, dead letters."""
        name = self.stream.job.name
        self.progress(f"checking {name}")
        if self.stream is self.streams[0]:
            self._check_resources()
        self._check_requests()
        migrated = self._check_journals()
        for request_id, stream in self.request_streams.items():
            status = self.report.requests[request_id]
            if stream is self.stream and status == "committed" and migrated[request_id] != 1:
                self.report.violations.append(
                    f"request {request_id} answered committed, migrated {migrated[request_id]} times"
                )
        expected = self._expected()
        outputs = self.stream.job.outputs(self.stream.root)
        got = Counter(outputs.counted) + Counter(outputs.late)
        self.report.keys_checked[name] = len(expected.counts)
        self.report.late_counted[name] = sum(outputs.late.values())
        self.report.lost += sum(1 for k, n in expected.counts.items() if got[k] < n)
        self.report.doubled += sum(1 for k, n in expected.counts.items() if got[k] > n)
        self.report.doubled += sum(1 for k in got if k not in expected.counts)
        self._check_dead_letters(expected.malformed)
        stored = self._stored_counts()
        if wrong := sorted(k for k in set(stored) | set(outputs.counted) if stored.get(k) != outputs.counted.get(k)):
            self.report.violations.append(
                f"{name}: {len(wrong)} key(s) whose stored state differs from the results, e.g. {wrong[:3]}"
            )

    def _check_resources(self) -> None:
        """Kill soaks: the figures a restarted stream keeps flat. Endurance runs: every figure,
        after the first retention cycle, with its trend in the report."""
        if not self.options.endurance or self.report.settle_s is None:
            self.report.violations.extend(growth_violations(self.report.resources))
            return
        self.report.trends, growing = endurance_figures(self.report.resources, self.report.settle_s)
        self.report.violations.extend(growing)

    def _expected(self) -> Expected:
        """What the stream must end with: its input topic as the tail read it (the ledger)."""
        from pipelines.kafka_topics import end_offsets

        self._drain(self.stream.topic, end_offsets(self.options.bootstrap, self.stream.topic))
        return self.expected[self.stream.job.name]

    def _drain(self, topic: str, end: dict[int, int]) -> None:
        (tail,) = [t for t in self.tails if t.topic == topic]
        tail.drain(end)
        if tail.skipped:
            self.report.violations.append(
                f"{tail.skipped} record(s) of {topic} were deleted by retention before the soak read them: "
                "the oracle is incomplete"
            )

    def _check_runs(self, timeout_s: float = 720) -> None:
        """Every resize run ended (none left STARTED by a killed part of Dagster: run monitoring
        fails one past its `dagster/max_runtime`, then cancels it); counts by source."""
        if self.room is None:
            return
        self.progress("waiting for resize runs to end")
        self.room.ensure_serving()
        deadline = time.monotonic() + timeout_s
        runs = self.room.resize_runs()
        while any(r.status not in ENDED for r in runs) and time.monotonic() < deadline:
            time.sleep(5)
            runs = self.room.resize_runs()
        counts: Counter[str] = Counter()
        for run in runs:
            counts[f"{'sensor' if run.by_sensor else 'manual'}_{run.status.lower()}"] += 1
            if run.status not in ENDED:
                self.report.violations.append(f"resize run {run.run_id} is still {run.status} after the soak")
        self.report.dagster_runs = dict(counts)

    def _check_dead_letters(self, malformed: set[str]) -> None:
        """Every rejected record is in the dead-letter topic with a reason, and nothing else is
        (replays may repeat a dead letter: the topic is at-least-once, keyed by position)."""
        from pipelines.kafka_topics import end_offsets
        from pipelines.streams.names import dead_letter_topic

        topic = dead_letter_topic(self.stream.job.name)
        self._drain(topic, end_offsets(self.options.bootstrap, topic))
        found = self.dead_letters[self.stream.job.name]
        self.report.dead_letters_expected += len(malformed)
        self.report.dead_letters_found += len(malformed & found.keys())
        missing = sorted(malformed - found.keys())
        if missing:
            self.report.violations.append(
                f"{len(missing)} rejected record(s) missing from the dead-letter topic, e.g. {missing[:3]}"
            )
        if unexpected := sorted(found.keys() - malformed):
            self.report.violations.append(
                f"{len(unexpected)} good record(s) in the dead-letter topic, e.g. {unexpected[:3]}"
            )
        if without := [p for p in malformed & found.keys() if not found[p]]:
            self.report.violations.append(f"{len(without)} dead letter(s) without a reason, e.g. {without[:3]}")

    def _check_requests(self) -> None:
        """Every request sent to `self.stream` was answered (observed while the answers were kept)."""
        self._observe_answers(self.stream)
        for request_id in [r for r, stream in self.request_streams.items() if stream is self.stream]:
            self.report.requests[request_id] = self.answers.get(request_id, "unanswered")

    def _observe_answers(self, stream: StreamProcess) -> None:
        """Note the answer to each request sent to `stream` as it appears. Run every few seconds:
        a stream forgets old answers (KEEP_ANSWERS, older than ANSWER_MIN_AGE_S)."""
        from pipelines.streams.control import ControlChannel

        control = ControlChannel(control_path(stream.root))
        waiting = [r for r, s in list(self.request_streams.items()) if s is stream and r not in self.answers]
        for request_id in waiting:
            try:
                answer = control.result(request_id)
            except (OSError, ValueError):  # forgotten while read, or damaged: read again next time
                continue
            if answer is not None:
                self.answers[request_id] = answer.status

    def _observe_journals(self, stream: StreamProcess) -> None:
        """Note every committed migration of `stream` with the request that asked for it. Run
        every few seconds: a stream keeps only its newest migration journals (KEEP_EPOCHS)."""
        from elasticity.migration.journal import Journal, Phase
        from elasticity.state import Location

        migrations = Location.of(elastic_path(stream.root)).child("migrations")
        seen = self.committed_migrations.setdefault(stream.job.name, {})
        for name in migrations.names():
            if name in seen:
                continue
            journal = Journal(migrations.child(name, "journal"), time.time)
            try:
                entries = journal.entries()
                committed = journal.has(Phase.COMMITTED)
            except (OSError, ValueError):  # forgotten while read, or being written
                continue
            if entries and committed:
                seen[name] = str(entries[0].get("request_id") or "")

    def _check_journals(self) -> Counter[str]:
        """No migration pending, every journal kept ended, and no request migrated more than once."""
        from elasticity.migration import LayoutRegistry
        from elasticity.migration.journal import Journal
        from elasticity.state import Location

        elastic = Location.of(elastic_path(self.stream.root))
        if LayoutRegistry(elastic).pending() is not None:
            self.report.violations.append("a migration is still pending after the soak")
        for name in elastic.child("migrations").names():
            journal = Journal(elastic.child("migrations", name, "journal"), time.time)
            if journal.entries() and not journal.is_finished():
                self.report.violations.append(f"migration journal {name} never ended: {journal.phases()}")
        self._observe_journals(self.stream)
        seen = self.committed_migrations.get(self.stream.job.name, {})
        self.report.migrations_committed += len(seen)
        committed_by = Counter(request_id for request_id in seen.values() if request_id)
        for request_id, times in committed_by.items():
            if times > 1:
                self.report.violations.append(f"request {request_id} was migrated {times} times")
        return committed_by

    def _stored_counts(self) -> dict[str, int]:
        """Every key's stored count, checking each is stored once and by its owner."""
        from elasticity.hashing import hash_str
        from elasticity.state import HistoryBackend, Int64Codec

        layout = self._committed_layout()
        if layout is None:
            self.report.violations.append("no committed layout after the soak")
            return {}
        backend = HistoryBackend(Int64Codec(), durable=elastic_path(self.stream.root))
        stored: dict[str, int] = {}
        for channel in backend.channels():
            items = list(backend.open(channel).items())
            if channel not in layout.channels:
                if items:
                    self.report.violations.append(
                        f"channel {channel} is outside the layout but keeps {len(items)} keys"
                    )
                continue
            for key, value in items:
                if key in stored:
                    self.report.violations.append(f"key {key!r} is stored twice")
                if layout.owner(hash_str(key)) != channel:
                    self.report.violations.append(f"key {key!r} is stored by channel {channel}, not its owner")
                stored[key] = int(value)
        backend.close()
        return stored
