"""Files and directories of this user's alone: the started sidecar's lock
file, log file and ingest socket live in the user's private directory
(:func:`private_dir`), and every file the plugin opens there is checked
to be this user's (:func:`open_private`).

GPU hosts are shared: a file or socket another user can replace would hand
them the plugin's records, its token or a way to make it write where they
choose.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import tempfile
from collections.abc import Mapping

from .errors import ConfigError


def private_dir(env: Mapping[str, str] | None = None) -> str:
    """This user's private directory, for the started sidecar's lock file,
    log file and socket, made ``0700``: ``vllm-otel-metrics`` in
    ``XDG_RUNTIME_DIR``, else ``vllm-otel-metrics-UID`` in the temporary
    directory. Raises :class:`ConfigError`, naming the path and what is
    wrong, when it is not this user's alone: a directory another user made
    or can enter, or a symbolic link (anyone can make one in ``/tmp``
    before this user does). Without ``XDG_RUNTIME_DIR`` another local user
    can thus turn the plugin off by making the path first; the error says
    so, and to set ``XDG_RUNTIME_DIR`` (systemd's ``/run/user/UID``) or
    ``TMPDIR`` to a directory of this user's alone.

    Other users share GPU hosts: a socket in a directory they can reach
    could be replaced by theirs, and then the plugin would stream to them;
    a lock or log file there could be a link to a file of this user's.
    """
    env = os.environ if env is None else env
    runtime = env.get("XDG_RUNTIME_DIR", "")
    shared = not (runtime and os.path.isabs(runtime))
    if not shared:
        path = os.path.join(runtime, "vllm-otel-metrics")
    else:
        path = os.path.join(tempfile.gettempdir(), f"vllm-otel-metrics-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise ConfigError(f"the private directory {path} cannot be made ({e.strerror})") from None
    why = _not_private(path)
    if why and shared:
        # In /tmp any local user can make the path first, and so turn the
        # plugin off: say so, and how to have a directory no one else can.
        raise ConfigError(
            f"the private directory {path} {why}: it must be a directory of this user's alone "
            "(mode 0700). XDG_RUNTIME_DIR is not set, so it is in the temporary directory, "
            "where another local user can make it first; set XDG_RUNTIME_DIR (systemd's "
            f"/run/user/{os.getuid()}) or TMPDIR to a directory of this user's alone, or "
            "remove it"
        )
    if why:
        raise ConfigError(
            f"the private directory {path} {why}: it must be a directory of this user's alone "
            "(mode 0700); remove it, or set XDG_RUNTIME_DIR to a directory of this user's alone"
        )
    return path


def _not_private(path: str) -> str:
    """Why ``path`` is not a directory of this user's alone, or empty."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return f"is a symbolic link (to {_link_target(path)})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.getuid():
        return f"belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})"
    if st.st_mode & 0o077:
        return f"is open to others (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


def _link_target(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def open_private(path: str, flags: int, *, user_named: bool = False) -> int:
    """Opens (making it ``0600`` if need be) a file of this user's: never
    through a symbolic link (``O_NOFOLLOW``), and only a regular file this
    user owns with no permission for group or others, and with one name
    (a hard link's other name may be any file of this user's: another user
    can make one in a shared directory); for a file the user named
    (``user_named``: a log file of their choosing, perhaps outside the
    private directory) its mode is theirs to choose. Returns the file
    descriptor (close-on-exec); raises :class:`ConfigError` naming the path
    and what is wrong.

    Opened without blocking: a FIFO put in its place would otherwise hang
    the open, before the check could refuse it.
    """
    try:
        fd = os.open(
            path,
            flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
            0o600,
        )
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ConfigError(f"{path} is a symbolic link (to {_link_target(path)})") from None
        raise ConfigError(f"{path} cannot be opened ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            why = "is not a regular file"
        elif st.st_uid != os.getuid():
            why = f"belongs to uid {st.st_uid}, not to this user (uid {os.getuid()})"
        elif st.st_nlink != 1:
            why = (
                f"has {st.st_nlink} hard links, not 1: it may be another of this user's files "
                "under a second name"
            )
        elif not user_named and st.st_mode & 0o077:
            why = f"is open to others (mode {stat.S_IMODE(st.st_mode):o})"
        else:
            why = ""
        if why:
            raise ConfigError(f"{path} {why}")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd
