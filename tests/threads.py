"""Which threads compile: shared by the background-compile tests."""

from __future__ import annotations

import threading

from guardscope import torch_compat


class CompileThreads:
    """The thread of every Dynamo compile started while it is on (Dynamo's compile-start callback)."""

    def __init__(self):
        self.threads: list[int] = []

    def __enter__(self):
        self._block = torch_compat.compile_start_callback(lambda _: self.threads.append(threading.get_ident()))
        self._block.__enter__()
        return self

    def __exit__(self, *exc_info):
        self._block.__exit__(*exc_info)
