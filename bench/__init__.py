"""Benchmark scripts (``python bench/<name>.py``; they print ratios, they are not tests). A package so the
smoke tests import them by name."""
