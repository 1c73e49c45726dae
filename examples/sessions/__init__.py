"""Clickstream sessionization, the example elastic job: `operator.Sessionize` (the keyed
stateful operator: per-user sessions closed by an event-time gap) and `oracle` (a
single-process reference of what it must emit, used by its tests)."""
