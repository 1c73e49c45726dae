"""`once_per_jvm`: a Column factory runs once per JVM and arguments, again for a new JVM."""

from __future__ import annotations

import threading

import pytest
from pyspark import SparkContext

from pipelines.column_cache import once_per_jvm


class Built:
    """Stands in for a Column: a fresh object per build, so identity tells builds apart."""


@pytest.fixture
def gateway(monkeypatch: pytest.MonkeyPatch) -> object:
    sentinel = object()
    monkeypatch.setattr(SparkContext, "_gateway", sentinel)
    return sentinel


def test_a_factory_runs_once_per_jvm(gateway: object) -> None:
    builds: list[Built] = []

    @once_per_jvm
    def column() -> Built:
        builds.append(Built())
        return builds[-1]

    assert column() is column()
    assert len(builds) == 1


def test_each_argument_gets_its_own_value(gateway: object) -> None:
    @once_per_jvm
    def of_stage(stage: str) -> tuple[str, Built]:
        return stage, Built()

    assert of_stage("main")[0] == "main"
    assert of_stage("second")[0] == "second"
    assert of_stage("main") is of_stage("main")
    assert of_stage("main") is not of_stage("second")


def test_a_new_jvm_gets_new_values(gateway: object, monkeypatch: pytest.MonkeyPatch) -> None:
    @once_per_jvm
    def column() -> Built:
        return Built()

    first = column()
    monkeypatch.setattr(SparkContext, "_gateway", object())  # the JVM was replaced

    second = column()

    assert second is not first
    assert column() is second


def test_keyword_arguments_are_refused(gateway: object) -> None:
    @once_per_jvm
    def of_stage(stage: str = "main") -> str:
        return stage

    with pytest.raises(TypeError, match="positional"):
        of_stage(stage="main")


def test_threads_racing_to_the_first_call_share_one_build(gateway: object) -> None:
    builds: list[Built] = []
    start = threading.Barrier(8)

    @once_per_jvm
    def column() -> Built:
        builds.append(Built())
        return builds[-1]

    def call(out: list[Built]) -> None:
        start.wait()
        out.append(column())

    seen: list[Built] = []
    threads = [threading.Thread(target=call, args=(seen,)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(builds) == 1
    assert all(value is builds[0] for value in seen)
