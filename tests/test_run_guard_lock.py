"""The output folder's lock (hf_aux.runtime.run_guard.acquire_lock / release_lock: an OS file lock through filelock)
between real processes: a second process is refused, naming the holder (PID, host) and the folder; a crashed
holder's lock is taken over with a warning; the lock is released, its file removed, on release() and at exit but
not by a forked child; one process holds several folders."""

import errno
import json
import logging
import os
import re
import socket
import subprocess
import sys

import pytest

from hf_aux.runtime import run_guard
from hf_aux.runtime.run_guard import OutputDirError, acquire_lock, lock_path, release_lock
from tiny import hold_lock

LOCK = "import sys; from hf_aux.runtime.run_guard import acquire_lock; lock = acquire_lock(sys.argv[1])"


def in_another_process(out, then: str = "") -> subprocess.CompletedProcess:
    """Lock `out` in a new process, run `then` there, and let it end without calling release()."""
    return subprocess.run([sys.executable, "-c", f"{LOCK}\n{then}", str(out)], capture_output=True, text=True,
                          timeout=300)


def in_use(out, pid: int) -> str:
    return f"output_dir {str(out)!r} is in use by process {pid} on {socket.gethostname()} (since "


def test_a_second_process_is_refused_naming_the_holder_until_release_for_each_of_several_folders(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    lock = acquire_lock(first)
    try:
        assert acquire_lock(first) == lock  # held already: kept as it is
        assert acquire_lock(second) == lock_path(second) != lock
        assert json.loads(lock.read_text())["pid"] == os.getpid()
        for folder in (first, second):
            refused = in_another_process(folder)
            assert refused.returncode != 0 and in_use(folder, os.getpid()) in refused.stderr, refused.stderr[-2000:]
        release_lock(lock)
        assert not lock.exists() and lock_path(second).exists()
        assert in_another_process(first).returncode == 0  # free again; that process's lock went at its exit
        assert not lock.exists()
        assert in_use(second, os.getpid()) in in_another_process(second).stderr  # the other folder: still held
    finally:
        release_lock(lock)
        release_lock(lock_path(second))
    assert not lock_path(second).exists()


def test_a_live_holder_refuses_this_process_and_its_lock_is_taken_over_after_it_crashed(tmp_path, caplog):
    out = tmp_path / "out"
    holder = hold_lock(out)  # another process, holding the lock
    try:
        with pytest.raises(OutputDirError, match=re.escape(in_use(out, holder.pid)) + r".*another --output_dir"):
            acquire_lock(out)
    finally:
        holder.kill()  # SIGKILL, as a crash: nothing is released by the process, its record stays
        holder.wait()
    assert json.loads(lock_path(out).read_text())["pid"] == holder.pid
    with caplog.at_level(logging.WARNING, logger=run_guard.__name__):
        lock = acquire_lock(out)
    try:
        assert f"Replacing the stale lock {lock}" in caplog.text
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    finally:
        release_lock(lock)


FORK_AND_EXIT = """
child = os.fork()
if child == 0:
    sys.exit(0)  # a forked child (a data loader worker) ending normally: the lock stays its parent's
os.waitpid(child, 0)
print("still locked" if lock.exists() else "removed", flush=True)
"""


def test_the_lock_is_released_at_exit_and_not_by_a_forked_child(tmp_path, caplog):
    out = tmp_path / "out"
    done = in_another_process(out, "import os\n" + FORK_AND_EXIT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "still locked"
    assert not lock_path(out).exists()  # removed at its exit, no release() called
    with caplog.at_level(logging.WARNING, logger=run_guard.__name__):
        release_lock(acquire_lock(out))
    assert "stale" not in caplog.text


def test_a_filesystem_without_file_locks_runs_with_a_warning_naming_the_folder(tmp_path, monkeypatch, caplog):
    class NoFileLocks:  # what filelock raises where flock is not implemented (Lustre mounted without flock)
        def __init__(self, *args, **kwargs):
            pass

        def acquire(self):
            raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(run_guard, "FileLock", NoFileLocks)
    with caplog.at_level(logging.WARNING, logger=run_guard.__name__):
        lock = acquire_lock(tmp_path / "out")  # runs as it did before the OS lock, which such a filesystem lacks
    assert re.search(re.escape(f"output_dir {str(tmp_path / 'out')!r}: cannot lock ") + r".*its filesystem offers "
                     r"no file locks, so a second run writing this folder at the same time is not detected", caplog.text)
    release_lock(lock)  # nothing held: a no-op
