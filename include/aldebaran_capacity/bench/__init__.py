"""Benchmarks (`make bench`): figures with the command, machine and date that produced them."""
