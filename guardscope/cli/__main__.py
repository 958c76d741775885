"""``python -m guardscope.cli ARGS``: the command line as a child process starts it (``analyze``
in its own process, the benchmarks)."""

from . import main

if __name__ == "__main__":  # pragma: no cover
    from ..proving.isolation import watch_parent

    watch_parent()  # started by run_child (fidelity's analysis): it ends when its parent is gone
    main()
