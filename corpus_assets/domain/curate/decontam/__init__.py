"""Benchmark decontamination: the frozen eval registry and n-gram containment from the benchmark side."""
