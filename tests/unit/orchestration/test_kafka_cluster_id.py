"""The Kafka cluster id handed to the storage tool: its format and the leading-dash retry."""

import re
import uuid

from orchestration.stack.kafka_broker import new_cluster_id

# 0xF8 as the first byte makes base64 start with '-' (index 62 in the URL-safe alphabet).
DASH_FIRST = uuid.UUID(bytes=bytes([0xF8]) + bytes(15))
PLAIN = uuid.UUID(bytes=bytes([0x10]) + bytes(15))


def test_a_cluster_id_is_22_url_safe_base64_characters():
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", new_cluster_id())


def test_an_id_that_would_start_with_a_dash_is_drawn_again():
    draws = iter([DASH_FIRST, DASH_FIRST, PLAIN])
    cluster_id = new_cluster_id(random_uuid=lambda: next(draws))
    assert not cluster_id.startswith("-")
    assert cluster_id == "EAAAAAAAAAAAAAAAAAAAAA"
