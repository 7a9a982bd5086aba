"""superb: sweep a grid of SimpleTVM runs without a human watching.

``superb run grid.yaml`` expands the grid, runs SimpleTVM once per combination (each in
its own process), and records one CSV row per run plus an aggregate; see superb.cli.
Importing this package imports nothing heavy.
"""

__version__ = "0.1.0"
