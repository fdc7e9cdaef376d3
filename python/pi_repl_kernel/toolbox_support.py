"""What the default toolbox's helper files share: atomic file replacement and text results.

The toolbox files (``toolbox/*.py``) are helper files like the ones users write, each loaded in
its own module; this module holds the pieces more than one of them needs, so each exists once.
"""

import os
import tempfile


def write_atomic(target, data, mode):
    """Replace ``target`` with ``data``: temp file in the same directory, fsync, chmod ``mode``,
    rename over ``target``, fsync the directory. The temp file is removed if anything (even a
    KeyboardInterrupt) stops the write before the rename."""
    parent, name = os.path.split(target)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass  # already renamed or never created: nothing to clean up
        raise
    try:
        directory = os.open(parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename itself has happened


class Text(str):
    """A plain ``str`` that IPython displays as the text itself, not as a quoted repr."""

    def _repr_pretty_(self, printer, cycle):
        printer.text(str(self))

    def __reduce__(self):
        return (str, (str(self),))  # pickles (and snapshots) as a plain str
