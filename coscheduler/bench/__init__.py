"""Benchmarks behind ``cosched bench``; each module holds one click command."""
