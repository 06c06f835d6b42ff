"""`python -m coscheduler.cli` runs the `cosched` command line."""

from . import main

if __name__ == "__main__":
    main()
