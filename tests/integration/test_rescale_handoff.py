"""The rescale hand-off between a request and a running stream: answered exactly once.

The stream's batch-boundary step (`ElasticStream.rescaling.apply_pending`) runs here on the real
state layer and Spark session, without a broker: the migrator is made to die (a BaseException,
as a SIGKILL would end the driver) or fail (an Exception) at a named point, then a fresh stream
object over the same folders restarts the way `prepare()` does (`recover()` first).
"""

from __future__ import annotations

import pytest

from elasticity.migration import Migrator
from elasticity.state import Location
from pipelines.streams.control import ControlChannel, RescaleRequest, RescaleTarget

pytestmark = pytest.mark.integration


class DriverKilled(BaseException):
    """Ends the driver at a hook point, like a SIGKILL: nothing of esp may catch it."""


def _stream(spark, tmp_path):
    """A stream object over the folders under tmp_path, started as `prepare()` starts it."""
    from elasticity.layout import Layout
    from pipelines.streams.runner import ElasticStream
    from pipelines.streams.spec import StreamSpec

    spec = StreamSpec(
        name="handoff", input_topic="unused", bootstrap_servers="127.0.0.1:1", root=str(tmp_path), channels=2
    )
    stream = ElasticStream(spark, spec)
    Location.of(spec.elastic_root).ensure()
    stream.registry.initialize(Layout.uniform(spec.channels))  # kept if one is committed
    stream.migrator().recover()
    return stream


def _with_hook(stream, point: str, error: BaseException) -> None:
    def hook(reached: str) -> None:
        if reached.startswith(point):
            raise error

    stream.first.use_migrator(Migrator(Location.of(stream.spec.elastic_root), stream.migrator().backend, hook=hook))


def test_a_crash_between_the_commit_and_the_answer_is_answered_not_applied_again(spark, tmp_path):
    stream = _stream(spark, tmp_path)
    request = RescaleRequest(target=RescaleTarget(op="split", channel=0), base_epoch=0)
    ControlChannel(stream.spec.control_dir).request(request)
    _with_hook(stream, "committed", DriverKilled())
    with pytest.raises(DriverKilled):
        stream.rescaling.apply_pending(batch_id=5)

    restarted = _stream(spark, tmp_path)
    answer = restarted.rescaling.apply_pending(batch_id=5)
    assert answer is not None and answer.status == "committed" and answer.layout.epoch == 1 and answer.recovered
    assert restarted.registry.committed().epoch == 1  # split once, not twice
    assert restarted.registry.committed().n_channels == 3
    assert ControlChannel(stream.spec.control_dir).take_request() is None
    assert ControlChannel(stream.spec.control_dir).result(request.request_id).status == "committed"


def test_a_failed_migration_stays_failed_after_a_restart(spark, tmp_path):
    stream = _stream(spark, tmp_path)
    request = RescaleRequest(target=RescaleTarget(op="scale_to", channels=4), base_epoch=0)
    ControlChannel(stream.spec.control_dir).request(request)
    # Past the vertical barrier: a recover() would roll this forward if it were left pending.
    _with_hook(stream, "collect:applied", RuntimeError("disk full"))
    answer = stream.rescaling.apply_pending(batch_id=3)
    assert answer is not None and answer.status == "failed" and "disk full" in answer.error

    restarted = _stream(spark, tmp_path)
    assert restarted.registry.committed().epoch == 0
    assert restarted.registry.committed().n_channels == 2
    assert ControlChannel(stream.spec.control_dir).result(request.request_id).status == "failed"


def test_a_stale_request_is_refused(spark, tmp_path):
    stream = _stream(spark, tmp_path)
    control = ControlChannel(stream.spec.control_dir)
    control.request(RescaleRequest(target=RescaleTarget(op="scale_to", channels=3), base_epoch=0))
    assert stream.rescaling.apply_pending(batch_id=1).status == "committed"
    stale = RescaleRequest(target=RescaleTarget(op="scale_to", channels=4), base_epoch=0)
    control.request(stale)
    answer = stream.rescaling.apply_pending(batch_id=2)
    assert answer.status == "failed" and "stale" in answer.error
    assert stream.registry.committed().n_channels == 3
