"""Runners: where a harness attempt runs (a local process group, a Kubernetes Job)."""
