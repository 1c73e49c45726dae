"""A fake Kafka producer side for unit tests of code that must outlive broker outages."""

from __future__ import annotations


class _Sent:
    def get(self, timeout: float) -> None:
        return None


class FlakyBroker:
    """Producers of a broker that is down while `down` is set, and counts what it took."""

    def __init__(self) -> None:
        self.down = False
        self.taken = 0
        self.values: list[bytes] = []
        self.producers = 0

    def producer(self, bootstrap: str) -> FlakyBroker.Producer:
        if self.down:
            raise ConnectionError(f"no broker at {bootstrap}")
        self.producers += 1
        return FlakyBroker.Producer(self)

    class Producer:
        def __init__(self, broker: FlakyBroker) -> None:
            self.broker = broker

        def send(self, topic: str, key: bytes, value: bytes) -> _Sent:
            if self.broker.down:
                raise TimeoutError("broker went away")
            self.broker.taken += 1
            self.broker.values.append(value)
            return _Sent()

        def flush(self, timeout: float) -> None:
            return None

        def close(self, timeout: float) -> None:
            return None
