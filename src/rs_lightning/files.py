"""Writing and reading run files so that a kill at any moment loses nothing finished.

A file a later step relies on (``config.yaml``, checkpoints, ``failed.json``) is written to a
temporary file in the same folder, flushed to disk and renamed over the old one: the rename is
atomic, so a reader sees either the old file or the new one, never half of either. Files
appended line by line (``eval_history.jsonl``, ``attempts.jsonl``) can end with a truncated
line after a kill; :func:`read_jsonl` drops it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator


@contextlib.contextmanager
def atomic_write(path: Path | str, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success it replaces ``path`` in one rename.

    On any error (or a kill) ``path`` keeps its old content and the temporary file is removed
    (a kill can leave a hidden ``.<name>.*.tmp``, which no reader looks at).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:  # a full disk or a folder made read-only: name the file
        error.filename = str(path)
        raise
    try:
        # mkstemp makes the file private (0600); give it the mode a plain open() would.
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(error, OSError) and error.filename in (None, tmp):
            error.filename = str(path)  # the file the user knows, not the temporary one
        raise
    _fsync_directory(path.parent)


def os_error_line(error: OSError) -> str:
    """A failed read or write in one line: the path and the system's reason."""
    reason = error.strerror or str(error) or type(error).__name__
    if isinstance(error, (FileExistsError, NotADirectoryError)):
        reason += " (a file stands where a folder is needed)"
    return f"{error.filename}: {reason}" if error.filename is not None else reason


def _umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it
    os.umask(mask)
    return mask


def _fsync_directory(folder: Path) -> None:
    """Make the rename itself durable (a power cut after it keeps the new file)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems do not support fsync on a folder
    finally:
        os.close(fd)


def write_text_atomic(path: Path | str, text: str) -> None:
    with atomic_write(path) as f:
        f.write(text)


def write_json_atomic(path: Path | str, data: Any) -> None:
    with atomic_write(path) as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")


def append_jsonl(path: Path | str, record: dict[str, Any]) -> None:
    """Append one JSON line, flushed to disk before returning. A last line cut short by a
    kill (no newline at its end) is ended first: the record never joins it, and
    :func:`read_jsonl` drops the cut line alone."""
    with open(path, "a+b") as f:
        end = f.seek(0, os.SEEK_END)
        cut = False
        if end:
            f.seek(end - 1)
            cut = f.read(1) != b"\n"  # (writes append wherever the read stopped)
        f.write((b"\n" if cut else b"") + json.dumps(record, sort_keys=True).encode() + b"\n")
        f.flush()
        os.fsync(f.fileno())


# The damaged lines already reported by this process: a file that several figures read is
# reported once.
_REPORTED: set[tuple[str, int, int]] = set()


def _warn_once(path: Path | str, where: int, message: str) -> None:
    key = (str(path), where, Path(path).stat().st_size if Path(path).exists() else -1)
    if key not in _REPORTED:
        _REPORTED.add(key)
        print(f"warning: {path}: {message}", file=sys.stderr)


def read_jsonl(path: Path | str, warn: bool = True) -> list[dict[str, Any]]:
    """The records (JSON objects) of a JSON-lines file; a line cut short by a kill, or any
    other line that is not a JSON object (a corrupt file), is dropped with a warning (once a
    process); a path that is not a regular file holds none."""
    records = []
    if not Path(path).is_file():
        if warn:
            _warn_once(path, 0, "not a regular file; no records read from it")
        return records
    lines = Path(path).read_bytes().splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            record = None
        if isinstance(record, dict):
            records.append(record)
        elif warn:
            where = "last line" if number == len(lines) else f"line {number}"
            _warn_once(path, number, f"skipping an unreadable {where} (cut short by a kill?)")
    return records


def truncate_jsonl(path: Path | str, keep) -> None:
    """Rewrite a JSON-lines file with only the readable records ``keep(record)`` accepts."""
    path = Path(path)
    if not path.exists():
        return
    records = [r for r in read_jsonl(path, warn=False) if keep(r)]
    write_text_atomic(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def run_files(sweep_dir: Path | str, name: str) -> list[Path]:
    """The file ``name`` of every run below a sweep folder: ``<job>/name``, and
    ``<job>/seed_<s>/name`` for the seeds of a ``parallel_seeds`` job; or of the run that
    ``sweep_dir`` itself is (``sweep_dir/name``)."""
    sweep_dir = Path(sweep_dir)
    itself = [sweep_dir / name] if (sweep_dir / name).is_file() else []
    return sorted([*itself, *sweep_dir.glob(f"*/{name}"), *sweep_dir.glob(f"*/seed_*/{name}")])
