"""Chapter 05 on a lent GPU machine, under that machine's own Python (benchmarks/gpu_check.sh)."""
