"""The user's private directory and the files the plugin makes in it: this
user's alone, or refused with the path and what is wrong named."""

import os
import stat
import tempfile

import pytest

from vllm_otel_metrics import config, private


def test_the_sidecars_files_live_in_a_directory_of_this_users_alone(tmp_path):
    env = {"XDG_RUNTIME_DIR": str(tmp_path)}
    directory = tmp_path / "vllm-otel-metrics"
    sidecar = config.from_env(env).sidecar
    assert (sidecar.ingest_socket, sidecar.lock_file, sidecar.log_file) == (
        str(directory / "ingest-50051.sock"),
        str(directory / "sidecar-50051.lock"),
        str(directory / "sidecar-50051.log"),
    )
    assert directory.stat().st_mode & 0o777 == 0o700
    # Without XDG_RUNTIME_DIR: a directory named after the user in the
    # temporary directory.
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(tempfile, "tempdir", str(tmp))
        assert private.private_dir({}) == str(tmp / f"vllm-otel-metrics-{os.getuid()}")


def _other_users(path):
    """Makes ``path`` another user's (``nobody``); needs root, as the test
    command runs."""
    if os.getuid() != 0:
        pytest.skip("needs root, to give a directory to another user")
    os.chown(path, 65534, 65534)


@pytest.mark.parametrize(
    "made_by,why",
    [
        ("this user, open to others", "is open to others (mode 755)"),
        ("a link to a directory", "is a symbolic link (to "),
        ("another user", "belongs to uid 65534, not to this user"),
        ("a file", "is not a directory"),
    ],
)
def test_a_private_directory_that_is_not_this_users_alone_refuses_the_sidecar(
    tmp_path, made_by, why
):
    """Before: a warning, and streaming over gRPC to the TCP port (which any
    user can hold). After: a ConfigError naming the path and what is wrong,
    which turns the plugin off (test_plugin.py)."""
    env = {"XDG_RUNTIME_DIR": str(tmp_path)}
    directory = tmp_path / "vllm-otel-metrics"
    if made_by == "this user, open to others":
        directory.mkdir(mode=0o700)
        directory.chmod(0o755)
    elif made_by == "a link to a directory":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        directory.symlink_to(tmp_path / "elsewhere")
    elif made_by == "another user":
        directory.mkdir(mode=0o700)
        _other_users(directory)
    else:
        directory.write_text("")
    with pytest.raises(config.ConfigError) as e:
        config.from_env(env)
    assert str(e.value).startswith(f"the private directory {directory} {why}")
    # A sidecar the plugin does not start needs no private directory.
    assert config.from_env({**env, "VLLM_OTEL_METRICS_SIDECAR": "off"}).sidecar is None


def test_the_lock_and_log_files_are_this_users_regular_files_alone(tmp_path):
    """Before: the lock file was opened "a+b" in /tmp (following a link
    another user put there), the log file likewise. After: open_private
    opens without following links and refuses what is not this user's
    regular file, with no permission for others."""
    mine = tmp_path / "mine.lock"
    fd = private.open_private(str(mine), os.O_RDWR)
    os.close(fd)
    assert stat.S_IMODE(mine.stat().st_mode) == 0o600
    target = tmp_path / "target"
    target.write_text("")
    (tmp_path / "link.lock").symlink_to(target)
    os.mkfifo(tmp_path / "fifo.log")
    (tmp_path / "open.log").write_text("")
    (tmp_path / "open.log").chmod(0o644)
    refused = {
        "link.lock": "is a symbolic link (to ",
        # Opened without blocking: a FIFO would otherwise hang the plugin.
        "fifo.log": "cannot be opened (No such device or address)",
        "open.log": "is open to others (mode 644)",
    }
    for name, why in refused.items():
        with pytest.raises(config.ConfigError) as e:
            private.open_private(str(tmp_path / name), os.O_WRONLY | os.O_APPEND)
        assert str(e.value).startswith(f"{tmp_path / name} {why}"), e.value
    # A log file the user named may be readable by others; never a link.
    os.close(private.open_private(str(tmp_path / "open.log"), os.O_WRONLY, user_named=True))
    with pytest.raises(config.ConfigError):
        private.open_private(str(tmp_path / "link.lock"), os.O_WRONLY, user_named=True)
    theirs = tmp_path / "theirs.log"
    theirs.write_text("")
    _other_users(theirs)
    with pytest.raises(config.ConfigError) as e:
        private.open_private(str(theirs), os.O_WRONLY, user_named=True)
    assert str(e.value) == f"{theirs} belongs to uid 65534, not to this user (uid {os.getuid()})"


def test_a_file_with_a_second_name_is_refused(tmp_path):
    """Before: open_private checked the owner, the type and the mode, not
    the link count, so a hard link another user put where the plugin's
    lock or log file goes (in a shared directory) opened whichever file of
    this user's it named, to be truncated or written. After: a file with
    more than one name is refused, the path named."""
    other = tmp_path / "notes"
    other.write_text("mine\n")
    other.chmod(0o600)
    linked = tmp_path / "sidecar.log"
    os.link(other, linked)
    for user_named in (False, True):
        with pytest.raises(config.ConfigError) as e:
            private.open_private(str(linked), os.O_WRONLY | os.O_APPEND, user_named=user_named)
        assert str(e.value) == (
            f"{linked} has 2 hard links, not 1: it may be another of this user's files under a "
            "second name"
        )
    assert other.read_text() == "mine\n"
    os.unlink(other)
    os.close(private.open_private(str(linked), os.O_WRONLY | os.O_APPEND))


def test_without_xdg_runtime_dir_the_error_says_how_to_have_a_private_directory(tmp_path):
    """Without XDG_RUNTIME_DIR the private directory is in the temporary
    directory, where another local user can make it first and so turn the
    plugin off. Before: the error said to remove it, which that user's
    directory does not allow. After: it says why, and what to set."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    path = tmp / f"vllm-otel-metrics-{os.getuid()}"
    path.mkdir(mode=0o700)
    path.chmod(0o755)
    advice = (
        "XDG_RUNTIME_DIR is not set, so it is in the temporary directory, where another local "
        f"user can make it first; set XDG_RUNTIME_DIR (systemd's /run/user/{os.getuid()}) or "
        "TMPDIR to a directory of this user's alone, or remove it"
    )
    with pytest.MonkeyPatch.context() as m:
        m.setattr(tempfile, "tempdir", str(tmp))
        with pytest.raises(config.ConfigError) as e:
            private.private_dir({})
        assert str(e.value) == (
            f"the private directory {path} is open to others (mode 755): it must be a directory "
            f"of this user's alone (mode 0700). {advice}"
        )
        path.chmod(0o700)
        _other_users(path)
        with pytest.raises(config.ConfigError) as e:
            private.private_dir({})
        assert str(e.value) == (
            f"the private directory {path} belongs to uid 65534, not to this user (uid "
            f"{os.getuid()}): it must be a directory of this user's alone (mode 0700). {advice}"
        )
