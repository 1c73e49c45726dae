"""The elasticity domain: the elastic control loop of `elasticity.control` wired to real streams.

collect  `collector.py`  BatchMetrics from `<stream>.metrics` + Kafka offsets -> MetricsSnapshot
evaluate/decide          `tick.py`: one `elasticity.control.ElasticLoop` tick per evaluation, its
                         state kept in the sensor cursor
realize  `sensor.py`     a RunRequest of `<stream>_resize_job` (tagged `esp/rescale: <stream>`)
         `realizer.py`   the rescale itself: a request to the running stream (applied at its
                         next batch boundary) or an offline migration of a stopped stream
         `assets.py`     `<stream>_layout`, the resizing asset, with plan, cost and a plot

`policy.py` holds the typed options (SLO, sampling, controller) with defaults per stream.
Modules that define Dagster assets or sensors do not use `from __future__ import annotations`.
"""
