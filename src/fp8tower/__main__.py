"""`python -m fp8tower` runs the `fp8tower` command."""

from .cli import main

if __name__ == "__main__":  # not when a spawned worker process imports the main module
    main()
