"""Benchmarks that print numbers; never timing assertions in tests."""
