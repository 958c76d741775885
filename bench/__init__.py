"""Benchmarks for guardscope (issue 5): see bench/README.md and docs/benchmarks.md."""
