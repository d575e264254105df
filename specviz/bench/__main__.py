"""`python -m specviz.bench`: the benchmark suite (see specviz.bench.suite)."""

import sys

from specviz.bench.suite import main

sys.exit(main())
