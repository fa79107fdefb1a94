"""`python -m executor.cli`: the same as the `sandbox-agent` command."""

from executor.cli import main

main()
