"""Metrics publishing never fails a batch: an outage drops records, counts them, and backs off."""

from __future__ import annotations

from pipelines.streams.metrics import BatchMetrics
from pipelines.streams.metrics_publisher import MetricsPublisher
from tests.fakes.kafka import FlakyBroker


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _metrics(batch_id: int) -> BatchMetrics:
    return BatchMetrics(stream="s", batch_id=batch_id, epoch=1, channels=2, wall_time=0.0)


def test_an_outage_drops_metrics_without_raising_and_the_next_record_says_how_many():
    broker, clock = FlakyBroker(), ManualClock()
    publisher = MetricsPublisher("b:9092", "s.metrics", b"s", producer_factory=broker.producer, clock=clock)
    assert publisher.publish(_metrics(0))
    broker.down = True
    assert not publisher.publish(_metrics(1))  # the send fails
    assert not publisher.publish(_metrics(2))  # within the backoff: not even tried
    broker.down = False
    assert not publisher.publish(_metrics(3))  # still within the backoff
    clock.now += 60
    assert publisher.publish(_metrics(4))
    received = [BatchMetrics.from_json(v) for v in broker.values]
    assert [m.batch_id for m in received] == [0, 4]
    assert received[-1].metrics_dropped == 3
    assert broker.producers == 2  # the producer of the failed send was dropped and rebuilt


def test_backoff_doubles_while_the_broker_stays_down():
    broker, clock = FlakyBroker(), ManualClock()
    publisher = MetricsPublisher(
        "b:9092", "s.metrics", b"s", producer_factory=broker.producer, clock=clock, max_backoff_s=4
    )
    broker.down = True
    waits = []
    for batch in range(5):
        before = clock.now
        while not publisher.publish(_metrics(batch)) and publisher.next_try_at <= clock.now:
            pass
        waits.append(publisher.next_try_at - before)
        clock.now = publisher.next_try_at
    assert waits == [1, 2, 4, 4, 4]
