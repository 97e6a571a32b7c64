"""Tests of the benchmark code (run with the default test command; they import nothing from tests/)."""
