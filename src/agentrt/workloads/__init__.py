"""Workload generators and importers that write workflow traces."""
