"""The files a stream's tables are made of: no Hadoop `.crc` sidecar beside each (half the files
of a folder per batch), and Parquet's own page checksums catch a damaged file instead."""

from __future__ import annotations

from pathlib import Path

import pytest


def _write_table(spark, folder: Path) -> Path:
    rows = spark.range(20_000).selectExpr("id", "concat('word-', cast(id % 977 as string)) as word")
    rows.coalesce(1).write.parquet(str(folder))
    return next(folder.glob("part-*.parquet"))


def test_a_table_folder_holds_no_checksum_sidecars(spark, tmp_path):
    _write_table(spark, tmp_path / "table")
    names = sorted(p.name for p in (tmp_path / "table").iterdir())
    assert [n for n in names if n.endswith(".crc")] == [], names
    assert "_SUCCESS" in names  # the state check still finds a finished batch by it


def test_a_damaged_page_fails_the_read_naming_the_checksum(spark, tmp_path):
    part = _write_table(spark, tmp_path / "table")
    data = bytearray(part.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside the column chunks' pages, far from header and footer
    part.write_bytes(bytes(data))
    with pytest.raises(Exception, match="(?i)checksum|crc"):
        spark.read.parquet(str(tmp_path / "table")).selectExpr("sum(id)", "count(distinct word)").collect()


def test_checksum_sidecars_come_back_when_configured():
    from pipelines.settings import SparkSettings
    from pipelines.spark_session import PAGE_CHECKSUMS_INSTEAD_OF_SIDECARS, spark_conf

    default = spark_conf(SparkSettings(), [])
    assert all(default[key] == value for key, value in PAGE_CHECKSUMS_INSTEAD_OF_SIDECARS.items())
    sidecars = spark_conf(SparkSettings(checksum_sidecars=True), [])
    assert not set(PAGE_CHECKSUMS_INSTEAD_OF_SIDECARS) & set(sidecars)
