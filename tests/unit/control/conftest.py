"""Fixtures of the control tests."""
