"""`python3 -m simulator.cli ARGS`: the `specdecsim` command where its console script is not installed."""

from simulator.cli import main

main()
