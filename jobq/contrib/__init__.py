"""Integrations with web frameworks; each needs its own extra."""
