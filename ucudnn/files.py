"""The files a user names: the one atomic writer every output goes through (``-o``,
``--csv``, ``cache export``, results, prototxt variants), and the one bounded reader of the
text files a user gives (prototxt, layer lists, benchmark tables: Note [Reading a named file]).

Note [Writing a named file]
    A file a command writes is written beside its target and renamed into place, so a reader
    (and a crash) sees the old file or the new one, never a part; what goes wrong leaves the
    folder as it was. :func:`write_file`:

    * refuses a target that exists and is not a regular file -- a FIFO, a character or block
      device (``/dev/null``), a socket, a folder, or a symlink to one of those -- whatever
      ``replace`` says, without opening it (opening a FIFO blocks; replacing a device node
      loses it);
    * refuses an existing regular file unless ``replace`` (the CLI's ``--force``); a symlink
      to a regular file writes the file it points to, as a shell redirection would;
    * gives a new file the umask's mode (0666 less the umask) and a replaced file the
      permission bits of the file it replaces -- never its setuid, setgid or sticky bits;
    * writes a temporary file in the target's folder (the rename must not cross file
      systems), flushes it to the disk with ``fsync`` where asked (a crash after the rename
      must not leave an empty file: the CLI's outputs and results ask), then ``os.replace``
      (or, where ``replace`` is off, ``os.link``, which fails on an existing name);
    * removes the temporary file on every failure, and names the target, never the temporary
      file, in the :class:`OSError` it raises (``ENOSPC``, ``EACCES``, ``EROFS`` ...).

Note [Reading a named file]
    :func:`read_text` reads a text file the user names, and refuses, with one
    :class:`InputError` naming the file (never a hang, a traceback or memory exhausted):

    * an empty path (``--prototxt ""`` must not fall back to a default net);
    * a FIFO, a character or block device (``/dev/zero``), a socket or a folder -- checked
      with ``stat`` before anything is opened (opening a FIFO blocks until a writer comes),
      and again on the open descriptor, which is opened ``O_NONBLOCK``;
    * a file larger than ``limit`` bytes (:data:`TEXT_LIMIT`, 64 MiB: the largest real Caffe
      prototxts are a few MB, a benchmark table of every kernel far less), read at most
      ``limit + 1`` bytes, so a file that grows while it is read is refused too;
    * a line longer than ``line_limit`` characters (:data:`LINE_LIMIT`, 1 MiB): a 50 MB line
      of spaces would otherwise cost gigabytes in the protobuf tokenizer. The CLI checks
      every file a user names this way before a parser sees it
      (:func:`ucudnn.cli.common.text_file`); the library's readers
      (:func:`ucudnn.plan.table.read_text`) pass ``line_limit=None`` and leave long lines to
      the parser, whose errors quote a capped excerpt of them;
    * binary content (a NUL byte) and text that is not UTF-8 (a BOM is dropped).
"""
from __future__ import annotations

import errno
import os
import secrets
import stat
from typing import Callable, Optional, Union

from .vocab import InputError

__all__ = ["write_file", "write_text", "check_target", "NotRegularFile", "read_text",
           "TEXT_LIMIT", "LINE_LIMIT"]

#: the largest text file :func:`read_text` reads (Note [Reading a named file])
TEXT_LIMIT = 64 * 1024 * 1024
#: the longest line it reads, in characters
LINE_LIMIT = 1024 * 1024

PathLike = Union[str, "os.PathLike[str]"]

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a folder"))


class NotRegularFile(OSError):
    """The target exists and is not a regular file: it is never written (Note [Writing a
    named file])."""


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def check_target(path: PathLike, *, replace: bool = False) -> str:
    """The file to write for ``path`` (a symlink's target, resolved), after the checks of Note
    [Writing a named file]: :class:`NotRegularFile`, :class:`FileExistsError` (an existing
    file without ``replace``), :class:`FileNotFoundError` (no such folder). Opens nothing."""
    path = os.fspath(path)
    if not path:
        raise FileNotFoundError(errno.ENOENT, "an empty path", path)
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        link = " (through a symlink)" if os.path.islink(path) else ""
        raise NotRegularFile(errno.EINVAL, f"is {_kind(st.st_mode)}{link}, not a regular "
                             "file; nothing was written to it", path)
    if st is not None and not replace:
        raise FileExistsError(errno.EEXIST, "exists; nothing was overwritten", path)
    if st is None and os.path.islink(path):
        raise NotRegularFile(errno.EINVAL, f"is a symlink to {real}, which does not exist; "
                             "nothing was written", path)
    folder = os.path.dirname(real)
    if not os.path.isdir(folder):
        raise FileNotFoundError(errno.ENOENT, f"the folder {folder} does not exist", path)
    return real


def write_file(path: PathLike, fill: Callable[[str], None], *, replace: bool = False,
               fsync: bool = True) -> None:
    """Write ``path`` through ``fill(tmp)``, which writes the whole content into the
    (existing, empty) file ``tmp``; then put it in place (Note [Writing a named file]).
    ``replace``: an existing regular file may be replaced. ``fsync``: flush the file to the disk
    before the rename. Raises :class:`OSError` naming ``path``; anything ``fill`` raises
    passes through. Either way the temporary file is gone."""
    shown = os.fspath(path)
    real = check_target(shown, replace=replace)
    folder, name = os.path.split(real)
    while True:
        tmp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            break
        except FileExistsError:
            continue
        except OSError as e:
            raise _named(e, shown) from None
    try:
        try:
            if replace:
                try:
                    os.fchmod(fd, stat.S_IMODE(os.stat(real).st_mode) & 0o777)
                except FileNotFoundError:
                    pass
        finally:
            os.close(fd)
        fill(tmp)
        if fsync:
            fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        check_target(shown, replace=replace)       # what appeared meanwhile
        if replace:
            os.replace(tmp, real)
        else:
            try:
                os.link(tmp, real)      # fails on an existing name, atomically
            except FileExistsError:
                raise FileExistsError(errno.EEXIST, "exists; nothing was overwritten",
                                      shown) from None
            except OSError as e:        # a file system without hard links: check, rename
                if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV):
                    raise
                if os.path.lexists(real):
                    raise FileExistsError(errno.EEXIST, "exists; nothing was overwritten",
                                          shown) from None
                os.replace(tmp, real)
    except OSError as e:
        raise _named(e, shown) from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _named(e: OSError, path: str) -> OSError:
    """``e`` naming ``path`` (the file the user named), not a temporary file."""
    if e.filename == path and e.filename2 is None:
        return e
    out = type(e)(e.errno, e.strerror or str(e), path) if e.errno else OSError(
        errno.EIO, e.strerror or str(e), path)
    return out


def write_text(path: PathLike, text: str, *, fsync: bool = False,
               replace: bool = True) -> None:
    """Write ``text`` (UTF-8) with :func:`write_file`; ``replace=False``: never overwrite
    (:class:`FileExistsError`, also where ``path`` appears while this writes)."""
    def fill(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    write_file(path, fill, replace=replace, fsync=fsync)


def read_text(path: PathLike, error=InputError, what: str = "text", *,
              limit: int = TEXT_LIMIT, line_limit: Optional[int] = LINE_LIMIT) -> str:
    """The UTF-8 text of the file at ``path`` (a BOM dropped), after the checks of Note
    [Reading a named file]; ``error`` (an :class:`InputError` class) naming the file
    otherwise -- never a bare OS or codec error. ``what`` says what the file should be."""
    path = os.fspath(path)
    if not path:
        raise error(f"an empty file name, not {what}")
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path}: is {_kind(st.st_mode)}, not {what}; nothing was read")
        if st.st_size > limit:
            raise error(f"{path}: {st.st_size} bytes, larger than the {limit} bytes read at "
                        f"most; not {what}")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):        # replaced between the stat and the open
                raise error(f"{path}: is {_kind(st.st_mode)}, not {what}; nothing was read")
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read(limit + 1)
        finally:
            os.close(fd)
    except OSError as e:
        raise error(f"{path}: cannot read: {e.strerror or e}") from None
    if len(data) > limit:
        raise error(f"{path}: larger than the {limit} bytes read at most; not {what}")
    nul = data.find(b"\0")
    if nul >= 0:
        raise error(f"{path}: a binary file (NUL bytes), not {what}; the first NUL byte at "
                    f"offset {nul}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise error(f"{path}: not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start}, "
                    f"line {line})") from None
    if line_limit is not None and len(text) > line_limit:
        for n, ln in enumerate(text.split("\n"), start=1):
            if len(ln) > line_limit:
                raise error(f"{path}:{n}: a line of {len(ln)} characters, longer than the "
                            f"{line_limit} read at most; not {what}")
    return text[1:] if text.startswith("\ufeff") else text
