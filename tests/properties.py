"""Hypothesis profiles: property tests are derandomised unless `make fuzz` asks otherwise.

Under `make test` and CI (the default), every property test draws the same
examples on every run: a fixed seed per test (`derandomize=True`) and no example
database, so the suite cannot pass on one run and fail on the next. A failure
prints the falsifying example and the `@reproduce_failure` blob that replays it.

`make fuzz` (PREFLAB_HYPOTHESIS_PROFILE=fuzz) runs the same properties with fresh
random draws and `PREFLAB_FUZZ_SCALE` (default 20) times as many examples, and keeps
what it finds in `.hypothesis/`; pin a case it finds with `@example`.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

PROFILE = os.environ.get("PREFLAB_HYPOTHESIS_PROFILE", "deterministic")
FUZZ_SCALE = int(os.environ.get("PREFLAB_FUZZ_SCALE", "20"))
# Property tests here share a function-scoped database across their examples on purpose
# (re-running must change nothing), and some draw large files.
QUIET = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile(
    "deterministic", derandomize=True, database=None, print_blob=True, deadline=None, suppress_health_check=QUIET
)
settings.register_profile(
    "fuzz",
    derandomize=False,
    max_examples=100 * FUZZ_SCALE,
    print_blob=True,
    deadline=None,
    suppress_health_check=QUIET,
    database=DirectoryBasedExampleDatabase(".hypothesis/examples"),
)
if PROFILE not in ("deterministic", "fuzz"):
    raise SystemExit(f"PREFLAB_HYPOTHESIS_PROFILE must be deterministic or fuzz, not {PROFILE!r}")
settings.load_profile(PROFILE)


def examples(n: int) -> int:
    """The number of examples a property test draws: `n`, or `n * PREFLAB_FUZZ_SCALE` under `make fuzz`."""
    return n * FUZZ_SCALE if PROFILE == "fuzz" else n
