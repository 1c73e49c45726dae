"""The stream's batch-boundary rescale step (`ElasticStream.rescaling.apply_pending`) on the real
state layer, without Spark or a broker: a planned layout is applied as given (under the next
free epoch), one that is not a successor of the committed layout is refused with the reason, and
a request without a plan is planned by the stream from its target. Every answer is a typed
`RescaleResult` in the control folder."""

from __future__ import annotations

import pytest

from elasticity.layout import Layout
from elasticity.state import Location
from pipelines.streams.control import ControlChannel, RescaleRequest, RescaleTarget
from pipelines.streams.runner import ElasticStream
from pipelines.streams.spec import StreamSpec


@pytest.fixture
def stream(tmp_path):
    """A stream object over tmp_path with 2 channels committed, as `prepare()` leaves it (no Spark)."""
    spec = StreamSpec(
        name="apply", input_topic="unused", bootstrap_servers="127.0.0.1:1", root=str(tmp_path), channels=2
    )
    stream = ElasticStream(None, spec)  # type: ignore[arg-type]  # the rescale step never touches Spark
    Location.of(spec.elastic_root).ensure()
    stream.registry.initialize(Layout.uniform(spec.channels))
    stream.migrator().recover()
    yield stream
    stream.stop(timeout_s=0)


def _apply(stream: ElasticStream, request: RescaleRequest):
    ControlChannel(stream.spec.control_dir).request(request)
    answer = stream.rescaling.apply_pending(batch_id=7)
    assert answer is not None
    assert ControlChannel(stream.spec.control_dir).result(request.request_id) == answer  # published as returned
    assert ControlChannel(stream.spec.control_dir).take_request() is None  # answered once
    return answer


def test_the_planned_layout_is_committed_as_given_under_the_next_epoch(stream):
    current = stream.registry.committed()
    # Not what the target alone gives (a split in half): the stream must not plan again.
    planned = current.split(1, fraction=0.25).renumbered(42)
    answer = _apply(stream, RescaleRequest(target=RescaleTarget(op="split", channel=1), base_epoch=0, planned=planned))
    assert answer.status == "committed" and answer.mode == "online" and not answer.recovered
    assert answer.layout == planned.renumbered(1) == stream.registry.committed()  # epochs are the registry's
    assert answer.report is not None and answer.report.operation == "split"
    assert (answer.report.channels_before, answer.report.channels_after) == (2, 3)


def test_a_planned_layout_that_is_not_a_successor_is_refused_with_the_reason(stream):
    # A uniform 3-channel ring re-deals hash space between channels 0 and 1, which both stay.
    planned = Layout.uniform(3, epoch=1)
    answer = _apply(
        stream, RescaleRequest(target=RescaleTarget(op="scale_to", channels=3), base_epoch=0, planned=planned)
    )
    assert answer.status == "failed" and answer.layout is None and answer.report is None
    assert "not a successor of committed epoch 0" in answer.error
    assert "channels kept in both" in answer.error
    assert stream.registry.committed() == Layout.uniform(2)
    assert stream.registry.pending() is None


def test_a_plan_without_its_base_epoch_is_refused(stream):
    planned = stream.registry.committed().scale_out(1)
    answer = _apply(stream, RescaleRequest(target=RescaleTarget(op="scale_to", channels=3), planned=planned))
    assert answer.status == "failed" and "base_epoch" in answer.error
    assert stream.registry.committed().epoch == 0


def test_a_stale_plan_is_refused(stream):
    planned = stream.registry.committed().scale_out(1)
    answer = _apply(
        stream, RescaleRequest(target=RescaleTarget(op="scale_to", channels=3), base_epoch=3, planned=planned)
    )
    assert answer.status == "failed" and "stale request" in answer.error


def test_a_request_without_a_plan_is_planned_by_the_stream_from_its_target(stream):
    # Hand-written requests and old clients name only the target.
    answer = _apply(stream, RescaleRequest(target=RescaleTarget(op="scale_to", channels=3), base_epoch=0))
    assert answer.status == "committed"
    assert answer.layout == Layout.uniform(2).scale_out(1) == stream.registry.committed()


def test_a_committed_rescale_names_the_executors_its_channels_get_when_they_follow(stream):
    """With executors following channels, the answer (and so the resizing asset's metadata)
    carries the executor count the new layout asks for; without, none."""
    from orchestration.elasticity.assets import _cost_metadata
    from pipelines.settings import ExecutorScalingSettings

    scaling = ExecutorScalingSettings(follow_channels=True, channels_per_executor=2, max_executors=2)
    stream.executors = object()  # as on a cluster master (the rescale step only asks whether it follows)
    stream.executor_scaling = scaling
    answer = _apply(stream, RescaleRequest(target=RescaleTarget(op="scale_to", channels=4)))
    assert answer.status == "committed" and answer.executors == 2
    assert _cost_metadata(answer)["executors"] == 2

    stream.executors = None  # local[*]: executors do not follow
    answer = _apply(stream, RescaleRequest(target=RescaleTarget(op="scale_to", channels=3)))
    assert answer.status == "committed" and answer.executors is None
    assert "executors" not in _cost_metadata(answer)


def test_a_deposed_drivers_later_stage_writes_nothing(tmp_path):
    """Every stage of a multi-stage job is fenced by the stream's one lease (on the first stage's
    folder): once another driver took the stream over, the old driver's second stage can neither
    migrate its layout nor commit a channel's batch."""
    from elasticity.lease import FencedOut, acquire

    spec = StreamSpec(
        name="paged", job="examples.sessions.pages:pages_job", bootstrap_servers="127.0.0.1:1", root=str(tmp_path)
    )
    old = ElasticStream(None, spec)  # type: ignore[arg-type]  # no Spark: the rescale step and the fence only
    pages = old.stages[1]
    Location.of(spec.elastic_root).ensure()
    pages.prepare()
    before = pages.registry.committed()
    old._take_lease()
    stale = old._lease
    assert stale is not None and pages.stage.fence == stale.fence
    stale.release()
    successor = acquire(spec.elastic_root, "the next driver")
    try:
        with pytest.raises(FencedOut):
            pages.migrator().migrate(pages.registry.committed().scale_out(1))
        with pytest.raises(FencedOut):
            pages.stage.fence.check()  # what each of the stage's channel tasks checks before it commits
        assert pages.registry.committed() == before and pages.registry.pending() is None
    finally:
        successor.release()
        old._lease = None
        old.stop(timeout_s=0)
