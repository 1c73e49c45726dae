"""The public job API refuses a job it cannot run with an error naming the problem, and loads a
job module by reference from the working directory."""

from __future__ import annotations

import sys

import pyarrow as pa
import pytest

from pipelines import api
from pipelines.streams.spec import StreamSpec


class _Echo(api.KeyedOperator[bytes]):
    state_codec = api.BytesCodec()

    def __init__(self, output_schema: pa.Schema, key_column: str = "key") -> None:
        self.output_schema = output_schema
        self.key_column = key_column

    def update(self, rows, state, ctx):
        return rows.select(self.output_schema.names)


def _parse(raw):
    return raw


OUTPUT = pa.schema([pa.field("key", pa.string()), pa.field("n", pa.int64())])


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"result_key_columns": ("missing",)}, "missing"),
        ({"result_key_columns": ()}, "result_key_columns is empty"),
        ({"operator": _Echo(OUTPUT.append(pa.field("channel", pa.int32())))}, "reserved columns \\['channel'\\]"),
        ({"operator": _Echo(OUTPUT, key_column="key_hash")}, "key_column 'key_hash'"),
        ({"allowed_lateness_ms": -1}, "allowed_lateness_ms"),
        ({"operator": object()}, "KeyedOperator"),
    ],
)
def test_a_job_that_cannot_run_is_refused_naming_why(kwargs, named):
    arguments = {"parse": _parse, "operator": _Echo(OUTPUT), "result_key_columns": ("key",), **kwargs}
    with pytest.raises(api.JobError, match=named):
        api.Job(**arguments)


def test_a_job_module_is_loaded_from_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "my_jobs").mkdir()
    (tmp_path / "my_jobs" / "__init__.py").write_text("")
    (tmp_path / "my_jobs" / "counting.py").write_text(
        "from pipelines import api\n"
        "def job():\n"
        "    counting = api.KeyedAggregate(api.Count())\n"
        "    return api.Job(parse=lambda raw: raw, operator=counting, result_key_columns=('key',))\n"
        "def not_a_job():\n"
        "    return 42\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    job = api.load_job("my_jobs.counting:job")
    assert isinstance(job.operator, api.KeyedAggregate) and job.result_key == "key"
    with pytest.raises(api.JobError, match="returned int"):
        api.load_job("my_jobs.counting:not_a_job")
    with pytest.raises(api.JobError, match="has no function 'absent'"):
        api.load_job("my_jobs.counting:absent")
    with pytest.raises(api.JobError, match="cannot import 'my_jobs.nowhere'"):
        api.load_job("my_jobs.nowhere:job")
    with pytest.raises(api.JobError, match="module:function"):
        api.load_job("my_jobs.counting")


def test_a_stream_names_a_built_in_job_or_a_reference():
    assert StreamSpec(job="examples.sessions.job:sessions_job").job.endswith(":sessions_job")
    with pytest.raises(ValueError, match="neither a built-in job"):
        StreamSpec(job="sessions")


PAGES = pa.schema([pa.field("page", pa.string()), pa.field("n", pa.int64())])


def _two_stages(**stage) -> api.Job:
    arguments = {"name": "pages", "operator": _Echo(PAGES, key_column="page"), **stage}
    return api.Job(parse=_parse, operator=_Echo(OUTPUT), result_key_columns=("page",), stages=(api.Stage(**arguments),))


def test_a_chain_of_stages_ends_in_the_last_operators_results():
    job = _two_stages(rekey=lambda rows: rows)
    assert job.stage_names == ("main", "pages") and job.last_operator.output_schema == PAGES
    # The results are the last stage's rows: a key column only the first stage has is refused.
    with pytest.raises(api.JobError, match="last operator's output schema"):
        api.Job(
            parse=_parse,
            operator=_Echo(OUTPUT),
            result_key_columns=("key",),
            stages=(api.Stage("pages", _Echo(PAGES, key_column="page"), rekey=lambda rows: rows),),
        )


@pytest.mark.parametrize(
    ("stage", "named"),
    [
        ({}, "key column 'page' is not in the previous stage's output"),  # no rekey, and no `page` upstream
        ({"name": "main", "rekey": _parse}, "not 'main'"),
        ({"name": "Pages", "rekey": _parse}, "lower-case"),
        ({"operator": object(), "rekey": _parse}, "KeyedOperator"),
        ({"operator": _Echo(PAGES.append(pa.field("batch_id", pa.int64())), "page"), "rekey": _parse}, "reserved"),
        ({"channels": 0, "rekey": _parse}, "channels must be within"),
    ],
)
def test_a_stage_that_cannot_run_is_refused_naming_why(stage, named):
    with pytest.raises(api.JobError, match=named):
        _two_stages(**stage)


def test_two_stages_of_one_name_are_refused():
    stage = api.Stage("pages", _Echo(PAGES, key_column="page"), rekey=_parse)
    with pytest.raises(api.JobError, match="used twice"):
        api.Job(parse=_parse, operator=_Echo(OUTPUT), result_key_columns=("page",), stages=(stage, stage))


def test_the_example_two_stage_job_loads_by_reference():
    job = api.load_job("examples.sessions.pages:pages_job")
    assert job.stage_names == ("main", "pages") and job.result_key_columns == ("landing_page",)
