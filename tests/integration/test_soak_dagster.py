"""The soak's Dagster control room under a Dagster fault: a resize run launched through the
webserver (run queue -> daemon -> code server -> run worker), its code server or the daemon
SIGKILLed while the run waits for the stream, the control room recovered the way the soak does.

The rescale must still happen exactly once: the run hands its request to the stream's control
folder before it waits, so whatever becomes of the run, the stream answers that request once and
commits the layout it answered with. The run itself must end (not stay STARTED until run
monitoring's `dagster/max_runtime`, 8 minutes), and the recovered control room must take the
next resize.

What Dagster 1.13 does meanwhile: neither kill stops the run worker (a child of the code server
that outlives it), so a run left alone ends by itself. A killed code server is not respawned
(`dagster dev` keeps running without it); a killed daemon makes `dagster dev` shut down, leaving
the code server and the run worker behind in its process group. The daemon case waits for that
exit before recovering: the recovery must then let the orphaned worker record its run's end
rather than SIGKILL it at once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest

from benchmarks.soak_dagster import ENDED, ControlRoom
from pipelines.streams.control import REQUEST
from pipelines.streams.names import checkpoint_path, control_path, elastic_path
from tests.integration.streams import committed_batches, config_for, kill_group, produce, start_stream
from tests.waiting import wait_for

if TYPE_CHECKING:
    from elasticity.layout import Layout
    from pipelines.streams.control import RescaleResult

pytestmark = [pytest.mark.integration, pytest.mark.long]

T = TypeVar("T")

STREAM = "wordcount"

SENSORS = """{ repositoriesOrError { ... on RepositoryConnection { nodes {
  sensors { name sensorState { id selectorId status } } } } } }"""

STOP_SENSOR = """mutation($origin: String!, $selector: String!) {
  stopSensor(jobOriginId: $origin, jobSelectorId: $selector) { __typename }
}"""


def _wait_for(what: str, condition: Callable[[], T], timeout_s: float, poll_s: float = 0.5) -> T:
    return wait_for(what, condition, timeout_s, poll_s)


def _stop_elasticity_sensor(room: ControlRoom) -> None:
    """The control room runs the stream's elasticity sensor; here only the test rescales."""
    for repository in room.graphql(SENSORS)["repositoriesOrError"]["nodes"]:
        for sensor in repository["sensors"]:
            state = sensor["sensorState"]
            room.graphql(STOP_SENSOR, {"origin": state["id"], "selector": state["selectorId"]})


def _results_for(root: Path, token: str) -> list[RescaleResult]:
    """The stream's answers (`RescaleResult`) to requests whose reason carries `token`."""
    from pipelines.streams.control import ControlChannel

    channel = ControlChannel(control_path(root))
    names = [n for n in channel.location.names() if n.startswith("result-") and n.endswith(".json")]
    answers = [channel.result(n.removeprefix("result-").removesuffix(".json")) for n in names]
    return [a for a in answers if a is not None and token in a.reason]


def _committed_layout(root: Path) -> Layout:
    from elasticity.migration import LayoutRegistry
    from elasticity.state import Location

    return LayoutRegistry(Location.of(elastic_path(root))).committed()


def _resize_and_check(room: ControlRoom, root: Path, channels: int, timeout_s: float = 180) -> str:
    """A resize to `channels` through Dagster that must succeed and be answered once; its run id."""
    token = f"test-soak-dagster-{uuid.uuid4().hex[:8]}"
    run_id = room.launch_resize({"op": "scale_to", "channels": channels}, token)
    status = room.wait_for_status(run_id, ENDED, timeout_s)
    assert status == "SUCCESS", f"resize run {run_id} is {status}; see {room.log}"
    (answer,) = _results_for(root, token)
    assert answer.committed and answer.layout.n_channels == channels
    assert _committed_layout(root) == answer.layout
    return run_id


@pytest.mark.parametrize("part", ["code_server", "daemon"])
def test_a_resize_run_whose_dagster_part_is_killed_rescales_once_and_the_room_recovers(
    tmp_path, bootstrap, topic_factory, part
):
    topic = topic_factory("words")
    config = config_for(tmp_path, bootstrap)
    # The catalog's folder for the stream, the one the control room's resizing asset rescales.
    root = tmp_path / "run" / "streams" / STREAM
    stream = start_stream(
        config,
        tmp_path / "stream.log",
        *("--name", STREAM, "--job", "wordcount", "--topic", topic, "--root", str(root)),
        *("--channels", "2", "--trigger", "2"),
    )
    room = ControlRoom(tmp_path, config, STREAM, topic)
    try:
        room.start()  # while the stream starts: both are slow on two cores
        _stop_elasticity_sensor(room)
        produce(bootstrap, topic, [f"alpha beta gamma w{i}" for i in range(300)])
        _wait_for("the stream's first batch", lambda: committed_batches(checkpoint_path(root)) > 0, 180)

        # In flight: the run has handed its request to the stream and waits for the answer.
        token = f"test-soak-dagster-{uuid.uuid4().hex[:8]}"
        run_id = room.launch_resize({"op": "scale_to", "channels": 3}, token)
        # The stream answers within a batch or two: look often, so the kill lands before the answer.
        request = Path(control_path(root)) / REQUEST
        _wait_for(f"resize run {run_id} handing its request over", request.exists, 150, poll_s=0.02)
        killed = room.kill_code_server() if part == "code_server" else room.kill_daemon()
        assert killed is not None, f"no {part} to kill"
        if part == "daemon":
            # `dagster dev` (1.13) shuts down when its daemon dies, but not its code server nor the
            # run worker that server launched: the recovery must not kill that worker mid-answer.
            _wait_for("dagster dev exiting", lambda: room.process is not None and room.process.poll() is not None, 60)
        else:
            time.sleep(2)  # as the soak does before it looks
        room.ensure_serving()
        assert room.daemons() and room.code_servers(), f"the control room did not recover; see {room.log}"

        status = room.wait_for_status(run_id, ENDED, 90)
        assert status in ENDED, f"resize run {run_id} is still {status} after the recovery; see {room.log}"
        (answer,) = _wait_for("the stream's answer", lambda: _results_for(root, token), 90)
        assert answer.committed, answer.error
        assert answer.layout.n_channels == 3
        assert _committed_layout(root) == answer.layout

        _resize_and_check(room, root, channels=2)
        assert len(_results_for(root, token)) == 1, "the first resize was answered again"
        assert stream.poll() is None, f"the stream exited; see {tmp_path / 'stream.log'}"
    finally:
        room.stop()
        kill_group(stream)
