"""The real-stack elasticity benchmark builds a policy the sensor accepts (it once passed a
resize wait beyond the run's own limit and failed before its first tick)."""

from benchmarks.elasticity_command import BenchOptions, bench_policy
from orchestration.elasticity.policy import ElasticityPolicy
from orchestration.names import RESIZE_MAX_WAIT_S


def bench_options(**changes: object) -> BenchOptions:
    values: dict[str, object] = dict(
        trace="esault",
        peak_rps=800.0,
        speed=1.25,
        cycles=1,
        service_ms=4.0,
        slo_s=15.0,
        interval_s=5.0,
        max_channels=8,
        initial_channels=1,
        static_seconds=45.0,
        static_target=0.9,
        max_offsets=10000,
    )
    values.update(changes)
    return BenchOptions(**values)  # type: ignore[arg-type]


def test_the_policy_takes_the_benchmark_options() -> None:
    policy = bench_policy(bench_options(slo_s=12.0, max_channels=6))
    assert policy.slo_s == 12.0
    assert policy.max_channels == 6
    assert policy.probe_timeout_s == 36.0


def test_a_resize_run_waits_as_long_as_a_run_may() -> None:
    assert bench_policy(bench_options()).rescale_timeout_s == RESIZE_MAX_WAIT_S


def test_the_utilization_targets_reach_the_policy_only_when_given():
    default = bench_policy(bench_options())
    defaults = ElasticityPolicy()
    assert (default.scale_out_utilization, default.scale_in_utilization) == (
        defaults.scale_out_utilization,
        defaults.scale_in_utilization,
    )
    tuned = bench_policy(bench_options(scale_out_utilization=0.8, scale_in_utilization=0.7))
    assert (tuned.scale_out_utilization, tuned.scale_in_utilization) == (0.8, 0.7)
