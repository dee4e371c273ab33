"""`python -m preflab` (used by `torchrun … -m preflab`)."""

from preflab.cli import cli

cli(prog_name="preflab")
