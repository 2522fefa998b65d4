"""A Python interpreter that has already imported torch, Lightning and Hydra, for the tests
that run ``train.py`` or ``rs-lightning`` as a command.

Importing that stack takes about 7 s a process on the CI machine, and the suite starts more
than a hundred such processes: most of their time was start-up. A server process imports it
once per pytest worker and forks a child for each command; the child runs the script as
``python script.py`` would (``sys.argv``, working folder, environment, ``__main__``) and ends
as Python's shutdown does, seen from outside (non-daemon threads joined, ``atexit``
functions, streams flushed, the exit status), without tearing down the preloaded modules.
The command the tests run is this file as a small launcher, started with ``python -S`` (no
site packages: it imports only the standard library) and the server's socket, which hands
its own standard streams, arguments, working folder and environment to the server, forwards
the signals it receives to the child, and exits as the child did (the same status, or killed
by the same signal).

A test that is about the process itself (kill -9 and resume, a signal's handling, what an
import pulls in) runs the real interpreter: ``sys.executable``. Without the server (the
server not started, or ``RS_TESTS_WARM_PYTHON=0``) the launcher runs the real
interpreter instead, so the tests pass either way.

    python -S tests/warm_python.py SOCKET train.py debug=quick   # `python train.py debug=quick`
    python tests/warm_python.py --serve SOCKET                    # the server (command() starts it)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

LAUNCHER = os.path.abspath(__file__)
# What every command of the suite imports; the rest is imported by each child as it needs it.
# W&B (with what wandb.init and its Table import, ~1.8 s a command) makes temporary folders
# at import, which each child replaces by its own (_own_temporary_folders).
PRELOAD = ("torch", "pytorch_lightning", "hydra", "omegaconf", "gymnasium",
           "rs_lightning.app.cli", "rs_lightning.app.jobs", "rs_lightning.app.train",
           "rs_lightning.app.console", "wandb", "wandb.sdk.launch.inputs.internal",
           "pytorch_lightning.loggers.wandb", "pandas")
# Objects made at import whose folder is deleted when the process that holds them exits:
# shared, the first child to exit would delete them for every later one.
# (module, attribute, the folder name's suffix)
WANDB_TEMPORARY_FOLDERS = (
    ("wandb.sdk.data_types._private", "MEDIA_TMP", "wandb-media"),
    ("wandb.sdk.artifacts.artifact", "Artifact._TMP_DIR", "wandb-artifacts"),
)
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


_socket_path: str | None = None


def command(real: bool = False) -> list[str]:
    """The start of a command line that runs Python: the warm launcher (the first call of a
    pytest process starts its server), or the interpreter itself where ``real`` (a test
    about the process)."""
    if real or os.environ.get("RS_TESTS_WARM_PYTHON") == "0":
        return [sys.executable]
    global _socket_path
    if _socket_path is None:
        _socket_path = _start_server()
    return [sys.executable, "-S", LAUNCHER, _socket_path]


def _start_server() -> str:
    import atexit
    import shutil
    import subprocess
    import tempfile
    import time

    folder = tempfile.mkdtemp(prefix="warm_python_")
    path = os.path.join(folder, "socket")
    with open(os.path.join(folder, "server.log"), "w") as log:
        server = subprocess.Popen([sys.executable, LAUNCHER, "--serve", path],
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                  start_new_session=True)

    def stop() -> None:
        server.kill()
        server.wait()
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(stop)
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # the socket is bound before the imports: commands queue behind them
    return path


# -- the launcher ---------------------------------------------------------------------------

def _served(args: list[str]) -> bool:
    """Whether the server can run these arguments: a script file, or ``-m`` a module of this
    package. Anything else (``-c``, flags) goes to the real interpreter."""
    if not args:
        return False
    if args[0] == "-m":
        return len(args) > 1 and args[1].split(".")[0] == "rs_lightning"
    return not args[0].startswith("-") and args[0].endswith(".py")


def _send(connection: socket.socket, message: dict) -> None:
    connection.sendall(json.dumps(message).encode() + b"\n")


def _lines(connection: socket.socket):
    buffer = b""
    while True:
        chunk = connection.recv(65536)
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield json.loads(line)


def launch(path: str, args: list[str]) -> None:
    if not _served(args):
        os.execv(sys.executable, [sys.executable, *args])
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(path)
    except OSError:
        os.execv(sys.executable, [sys.executable, *args])
    request = {"args": args, "cwd": os.getcwd(), "env": dict(os.environ)}
    try:
        socket.send_fds(connection, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
        replies = _lines(connection)
        next(replies)  # the child's pid: it has started
    except (OSError, StopIteration):  # the server ended before starting it (its log says why)
        os.execv(sys.executable, [sys.executable, *args])
    for number in FORWARDED:
        signal.signal(number, lambda received, _: _send(connection, {"signal": received}))
    status = next(replies)["status"]
    if os.WIFSIGNALED(status):
        _die_by(os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status))


def _die_by(number: int) -> None:
    """End this process by signal ``number``, as its default action does."""
    signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)


# -- the server -----------------------------------------------------------------------------

def serve(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)  # launchers that connect during the imports wait in this queue
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # not installed here (pandas is optional): a child imports it
            print(f"not preloaded: {name}", flush=True)
    _temporary_folders()  # fails here, at start, if W&B has moved them
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the monitors below are reaped at once
    parent = os.getppid()
    listener.settimeout(1.0)
    while os.getppid() == parent:  # the pytest worker is gone: so is the server
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            continue
        if os.fork() == 0:
            listener.close()
            _monitor(connection)  # never returns in the monitor; the child returns
            return
        connection.close()
    import shutil

    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def _monitor(connection: socket.socket) -> None:
    """In a process of its own: start the command's child, pass the launcher's signals to it,
    report how it ended. Where the launcher dies (kill -9), the child is killed too."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    while not message.endswith(b"\n"):
        message += connection.recv(1 << 20)
    request = json.loads(message)
    child = os.fork()
    if child == 0:
        connection.close()
        _become(request, fds)
        return
    for fd in fds:
        os.close(fd)
    _send(connection, {"pid": child})
    ended = os.pidfd_open(child)
    import select

    buffer = b""
    while True:
        ready, _, _ = select.select([connection, ended], [], [])
        if ended in ready:
            _, status = os.waitpid(child, 0)
            try:
                _send(connection, {"status": status})
            except OSError:
                pass
            os._exit(0)
        chunk = connection.recv(4096)
        if not chunk:  # the launcher is gone
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            os._exit(0)
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            os.kill(child, json.loads(line)["signal"])


def _temporary_folders() -> list:
    """The preloaded modules' ``tempfile.TemporaryDirectory`` objects, with their suffixes."""
    import operator
    import tempfile

    found = []
    for module, attribute, suffix in WANDB_TEMPORARY_FOLDERS:
        if module not in sys.modules:  # W&B not preloaded: a child makes its own
            continue
        folder = operator.attrgetter(attribute)(sys.modules[module])
        if not (isinstance(folder, tempfile.TemporaryDirectory) and folder.name.endswith(suffix)):
            raise SystemExit(f"{module}.{attribute} is not a temporary folder: update the list")
        found.append((folder, suffix))
    return found


def _own_temporary_folders() -> None:
    """Give this child temporary folders of its own, as a fresh import would, in place (the
    modules that imported the objects by name hold the same ones): the server's stay
    untouched when the child exits."""
    for folder, suffix in _temporary_folders():
        folder._finalizer.detach()  # the server's folder: not this process's to delete
        folder.__init__(suffix=suffix)


def _become(request: dict, fds: list[int]) -> None:
    """Turn this forked process into ``python <args>``; :func:`_shut_down` ends it."""
    import runpy

    _own_temporary_folders()

    for number in FORWARDED + (signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python sets it at start-up
    sys.stdout.flush()
    sys.stderr.flush()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    args = request["args"]
    try:
        if args[0] == "-m":
            sys.argv = [args[1], *args[2:]]
            sys.path[:] = [os.getcwd(), *extra, *sys.path[1:]]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(args)
            sys.path[:] = [os.path.dirname(os.path.abspath(args[0])), *extra, *sys.path[1:]]
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as stop:
        _shut_down(_exit_status(stop.code))
    except KeyboardInterrupt:  # as Python ends on it: the traceback, then killed by SIGINT
        import traceback

        traceback.print_exc()
        _shut_down(signal.SIGINT)
    except BaseException:  # noqa: BLE001  (an uncaught error: its traceback, status 1)
        import traceback

        traceback.print_exc()
        _shut_down(1)
    _shut_down(0)


def _exit_status(code) -> int:
    """The status ``raise SystemExit(code)`` ends Python with (a message: printed, 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _shut_down(status: int | signal.Signals) -> None:
    """End the child as Python's own shutdown would, seen from outside: wait for its
    non-daemon threads, run its ``atexit`` functions, flush its streams, then exit with
    ``status`` (or die by that signal). The rest of a shutdown, tearing down every module
    the server preloaded, costs about 1.4 s a command and shows nothing outside."""
    import atexit
    import threading

    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: Python ignores it too
            pass
    if isinstance(status, signal.Signals):
        _die_by(status)
    os._exit(status & 0xFF)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
    else:
        launch(sys.argv[1], sys.argv[2:])
