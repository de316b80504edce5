"""Fault injection and concurrency harness: scenarios, a commit history recorder and the
invariant checker. ``python -m tests.faults [--quick|--full]`` runs the scenarios."""
