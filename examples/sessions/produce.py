"""Send example clicks to the sessions stream's input topic (the user guide's load):
`python -m examples.sessions.produce --clicks 5000`.

Clicks of 50 users over 6 pages, 0-3 s apart in event time (a user clicks about every 75 s, so
the 30 s gap splits sessions often), keyed by user so each user's clicks stay in order.
"""

from __future__ import annotations

import json
import random
import time

import typer
from rich.progress import track

CLICKS_TOPIC = "clicks"


def clicks(count: int, seed: int, start_ms: int) -> list[dict[str, object]]:
    """`count` clicks in event-time order from `start_ms`."""
    rng, t, out = random.Random(seed), start_ms, []
    for _ in range(count):
        t += rng.randint(0, 3_000)
        out.append({"user_id": f"u{rng.randrange(50)}", "page": f"p{rng.randrange(6)}", "event_time": t})
    return out


def main(
    clicks_count: int = typer.Option(5_000, "--clicks", min=1, help="How many clicks to send."),
    topic: str = typer.Option(CLICKS_TOPIC, help="The stream's input topic."),
    bootstrap: str = typer.Option("127.0.0.1:9092", help="Kafka bootstrap address."),
    seed: int = typer.Option(0, help="Seed of the clicks."),
    start_ms: int | None = typer.Option(None, help="Event time of the first click, epoch ms (default: 3 h ago)."),
) -> None:
    from kafka import KafkaProducer

    start = start_ms if start_ms is not None else int(time.time() * 1000) - 3 * 3_600_000
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    for click in track(clicks(clicks_count, seed, start), description=f"sending to {topic}"):
        producer.send(topic, key=str(click["user_id"]).encode(), value=json.dumps(click).encode())
    producer.flush()
    producer.close()


if __name__ == "__main__":
    typer.run(main)
