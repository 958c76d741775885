"""``python -m guardscope.cli ARGS``: the command line as a child process starts it (``analyze``
in its own process, the benchmarks)."""

from . import main

if __name__ == "__main__":  # pragma: no cover
    main()
