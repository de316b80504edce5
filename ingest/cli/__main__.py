"""``python -m calving.ingest.cli ...``: the ``calving`` command (as the tests and the
benchmarks start it with the interpreter they run on)."""

import sys

from calving.ingest.cli import main

sys.exit(main())
