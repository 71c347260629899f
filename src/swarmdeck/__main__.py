"""`python -m swarmdeck`."""

from swarmdeck.cli.app import main

main()
