"""One shape for a figure over repeated runs, used by every `--repetitions` benchmark."""

from benchmarks.repeats import spread


def test_spread_is_the_median_min_and_max_of_the_values_measured():
    assert spread([3.0, None, 1.0, 2.0]) == {
        "median": 2.0,
        "min": 1.0,
        "max": 3.0,
        "n": 3,
        "runs": [3.0, None, 1.0, 2.0],
    }
    assert spread([4.0, 1.0])["median"] == 2.5


def test_nothing_measured_has_no_median():
    assert spread([None]) == {"median": None, "min": None, "max": None, "n": 0, "runs": [None]}
