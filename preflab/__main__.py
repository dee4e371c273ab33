from preflab.cli import cli

cli()
