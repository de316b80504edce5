"""``python -m calving.ingest.launch ...``: the ``calving`` command as installed (Arrow's
pool chosen first), for the tests and benchmarks that start it with their interpreter."""

import sys

from calving.ingest.launch import main

sys.exit(main())
