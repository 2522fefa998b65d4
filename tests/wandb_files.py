"""Reading the offline W&B runs the tests make: the records of a run's ``.wandb`` file."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any


def wandb_records(path: Path):
    """The records of a W&B ``.wandb`` file (LevelDB log framing: 32 KiB blocks, a 7-byte
    header per chunk: CRC, length, type; full = 1, first = 2, middle = 3, last = 4)."""
    from wandb.proto import wandb_internal_pb2

    data, pos, block, chunks = path.read_bytes(), 7, 32768, b""
    while pos + 7 <= len(data):
        room = block - pos % block
        if room < 7:
            pos += room
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        chunks = chunk if kind in (1, 2) else chunks + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            yield record


def run_record(offline_run: Path):
    (path,) = offline_run.glob("*.wandb")
    return next(r.run for r in wandb_records(path) if r.WhichOneof("record_type") == "run")


def summary(offline_run: Path) -> dict[str, Any]:
    """The run's summary as its last summary records left it."""
    (path,) = offline_run.glob("*.wandb")
    values: dict[str, Any] = {}
    for record in wandb_records(path):
        if record.WhichOneof("record_type") == "summary":
            for item in record.summary.update:
                key = item.key or "/".join(item.nested_key)
                values[key] = json.loads(item.value_json)
    return values
