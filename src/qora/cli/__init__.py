"""The ``qora`` command line, the top floor of the house: it imports the engines, the viewer, the
scale-out layer and the benchmarks; nothing imports it. One module per group."""

from qora.cli.root import cli, main

__all__ = ["cli", "main"]
