"""The warm interpreter of the tests (tests/warm_python.py) runs a script as the real one
does: the same output, exit status, working folder, environment and import path; a signal
sent to the command reaches the script; a command killed with kill -9 takes its script
with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.warm_python import command

SCRIPT = '''
import atexit, json, os, sys
atexit.register(lambda: print("atexit ran"))
import helper_module_of_the_test
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "marker": os.environ.get("MARKER"),
                  "helper": helper_module_of_the_test.VALUE, "main": __name__}))
print("to stderr", file=sys.stderr)
if "fail" in sys.argv:
    raise ValueError("failed on purpose")
sys.exit(int(sys.argv[1]))
'''


@pytest.fixture
def script(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helper_module_of_the_test.py").write_text("VALUE = 42\n")
    path = tmp_path / "script.py"
    path.write_text(SCRIPT)
    return path


@pytest.mark.parametrize("args", [["3", "x y"], ["0", "fail"]])
def test_a_script_runs_as_under_the_real_interpreter(script, tmp_path, args):
    env = dict(os.environ, MARKER="seen", PYTHONPATH=os.pathsep.join(
        filter(None, [str(tmp_path / "lib"), os.environ.get("PYTHONPATH")])))
    results = [subprocess.run([*python, str(script), *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
               for python in (command(real=True), command())]
    real, warm = results
    assert command() != command(real=True)
    assert (warm.returncode, warm.stdout) == (real.returncode, real.stdout)
    assert warm.stderr.splitlines()[0] == real.stderr.splitlines()[0] == "to stderr"
    if "fail" in args:
        assert real.returncode == 1 and "ValueError: failed on purpose" in warm.stderr
    else:
        assert real.returncode == 3 and '"marker": "seen"' in real.stdout
        assert '"helper": 42' in real.stdout and '"main": "__main__"' in real.stdout
        assert real.stdout.endswith("atexit ran\n")


def wait_for(path, process, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return open(f"/proc/{pid}/stat").read().split()[2] != "Z"


SLEEPER = '''
import os, pathlib, signal, sys, time
print("SIGINT:", signal.getsignal(signal.SIGINT), file=sys.stderr, flush=True)
pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
time.sleep(300)
'''


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
@pytest.mark.parametrize("real", [True, False], ids=["real", "warm"])
def test_a_signal_to_the_command_reaches_the_script(tmp_path, number, real):
    """SIGTERM and SIGINT are passed on, and the command ends as its script did: killed by
    that signal, as under the real interpreter. kill -9, which the launcher cannot pass on,
    makes the server kill the script."""
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    pid_file = tmp_path / "pid"
    # A child inherits an ignored SIGINT, and Python then leaves it ignored: start the command
    # as from a terminal, with SIGINT caught here (a caught signal is reset on exec).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(
            [*command(real=real), str(tmp_path / "sleeper.py"), str(pid_file)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    finally:  # (None: a handler not set from Python, which no test sets)
        signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
    wait_for(pid_file, process)
    while not pid_file.read_text():
        time.sleep(0.01)
    script_pid = int(pid_file.read_text())
    assert (script_pid == process.pid) == real
    process.send_signal(number)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"the command outlived the signal by 60 s; its stderr: {process.communicate()[1]}")
    assert process.returncode == -number, process.stderr.read()
    deadline = time.monotonic() + 10
    while alive(script_pid):
        assert time.monotonic() < deadline, "the script outlived its command"
        time.sleep(0.02)


def test_arguments_it_does_not_serve_go_to_the_real_interpreter():
    result = subprocess.run([*command(), "-c", "import sys; print(sys.flags.no_site)"],
                            capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == str(sys.flags.no_site)


WANDB_FOLDERS = '''
import os, sys
from wandb.sdk.data_types._private import MEDIA_TMP
from wandb.sdk.artifacts.artifact import Artifact
for folder in (MEDIA_TMP, Artifact._TMP_DIR):
    assert os.path.isdir(folder.name), folder.name
    print(folder.name)
'''


def test_each_command_has_wandb_temporary_folders_of_its_own(tmp_path):
    """W&B is preloaded, and deletes its media and artifact folders when a process exits:
    each command gets its own, made at its start and deleted at its end, so that one
    command's exit leaves the next one's folders in place."""
    script = tmp_path / "folders.py"
    script.write_text(WANDB_FOLDERS)
    seen = []
    for _ in range(2):
        result = subprocess.run([*command(), str(script)], capture_output=True, text=True,
                                timeout=120, check=False)
        assert result.returncode == 0, result.stderr
        seen.append(result.stdout.split())
    assert len(seen[0]) == 2 and not set(seen[0]) & set(seen[1])
    assert seen[0][0].endswith("wandb-media") and seen[0][1].endswith("wandb-artifacts")
    assert not any(os.path.exists(name) for name in seen[0] + seen[1])


ENDINGS = '''
import sys, threading, time
def late():
    time.sleep(0.3)
    print("thread done", flush=True)
threading.Thread(target=late).start()
code = sys.argv[1]
sys.exit(None if code == "none" else int(code) if code.lstrip("-").isdigit() else code)
'''


@pytest.mark.parametrize("code", ["none", "259", "-1", "a message"])
def test_a_script_ends_as_under_the_real_interpreter(tmp_path, code):
    """The warm child skips the teardown of the preloaded modules, not what shows: its
    non-daemon threads finish, SystemExit's code or message becomes the same status."""
    script = tmp_path / "endings.py"
    script.write_text(ENDINGS)
    real, warm = (subprocess.run([*python, str(script), code], capture_output=True, text=True,
                                 timeout=120, check=False)
                  for python in (command(real=True), command()))
    assert (warm.returncode, warm.stdout, warm.stderr) == (real.returncode, real.stdout,
                                                           real.stderr)
    assert real.stdout == "thread done\n"
    assert real.returncode == {"none": 0, "259": 3, "-1": 255, "a message": 1}[code]


def test_a_server_that_ends_before_starting_the_command_leaves_it_to_the_real_interpreter(
        script, tmp_path):
    """A server that failed at start (a preload it could not make) closes the connections
    queued behind it: their commands run on the real interpreter, not fail."""
    import socket
    import threading

    from tests.warm_python import LAUNCHER

    path = str(tmp_path / "socket")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def accept_then_end() -> None:
        connection, _ = listener.accept()
        connection.close()

    ended = threading.Thread(target=accept_then_end)
    ended.start()
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "lib"))
    result = subprocess.run([sys.executable, "-S", LAUNCHER, path, str(script), "4"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120, check=False)
    ended.join()
    listener.close()
    assert result.returncode == 4 and '"helper": 42' in result.stdout, result.stderr
