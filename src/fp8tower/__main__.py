"""`python -m fp8tower` runs the `fp8tower` command."""

from .cli import main

main()
