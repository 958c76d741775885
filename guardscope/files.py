"""The one atomic writer and file-mode policy, for the corpus and the analysis folder alike.

A file is written to a temporary file in the same folder, then renamed over its path, so an
interrupted run never leaves half a file behind. ``os.open`` with 0o666 lets the umask decide the
permissions, as for any file the user writes (0644 by default; ``tempfile.mkstemp`` would leave
them at 0o600, unreadable to reviewers).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, sync: bool = False) -> None:
    """Write ``data`` to ``path`` atomically (``sync``: fsync before the rename). Raises
    ``OSError`` as the file system does; callers say what failed in their own terms."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
            if sync:
                stream.flush()
                os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
