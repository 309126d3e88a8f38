"""`python -m aotc` is the `aotc` command."""

from aotc.cli import main

main()
