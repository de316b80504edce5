"""``calving ARGS`` with the broken build ``CALVING_FAULTS_MUTATION`` names applied in
this process first (tests.faults.mutations): ``python -m tests.faults.mutated_cli ARGS``.
The commit runs on the driver, so the driver is the only process that needs it."""

from __future__ import annotations

import os
import sys

from tests.faults import mutations


def main() -> int:
    mutations.apply(os.environ.get(mutations.MUTATION_ENV))
    from calving.ingest.cli import main as calving

    return calving(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
