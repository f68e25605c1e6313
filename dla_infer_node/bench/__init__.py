"""Benchmarks (not tests): each writes its figures to a JSON file under bench/results."""
