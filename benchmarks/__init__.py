"""Benchmarks, run by hand (``python -m benchmarks.core``); never part of the tests."""
