"""`python -m tests.bench`: see tests/bench/runner.py."""

from tests.bench.runner import main

raise SystemExit(main())
