"""Reader for the interposer's record files (layout: profiler/src/tprof.h).

Pure file parsing, no aggregation: one ``RecordFile`` per profiled process,
holding its header fields and a numpy structured array of its completed
records. Damaged files raise ``RecordFileError`` with a one-line reason, so the
aggregator can turn them into a "no profile" result instead of a wrong skew.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from teiresias.errors import TeiresiasError

MAGIC = b"TPROFv1\x00"
VERSION = 1
HEADER_SIZE = 128
RECORD_SIZE = 64
SUFFIX = ".tprof"

HEADER_DTYPE = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u4"),
        ("header_size", "<u4"),
        ("record_size", "<u4"),
        ("state", "<u4"),
        ("capacity", "<u8"),
        ("count", "<u8"),
        ("start_mono_ns", "<u8"),
        ("start_real_ns", "<u8"),
        ("pid", "<i4"),
        ("rank", "<i4"),
        ("world_size", "<i4"),
        ("local_rank", "<i4"),
        ("iterations", "<u8"),
        ("window_ns", "<u8"),
        ("dropped", "<u8"),
        ("slurm_restart", "<i4"),
        ("elastic_restart", "<i4"),
        ("host", "S24"),
    ]
)
RECORD_DTYPE = np.dtype(
    [
        ("t_ns", "<u8"),
        ("dur_ns", "<u4"),
        ("kind", "<u2"),
        ("flags", "<u2"),
        ("bytes", "<u8"),
        ("slot", "<u8"),
        ("msg_len", "<u8"),
        ("offset", "<u8"),
        ("opcode", "<u8"),
        ("fd", "<i4"),
        ("nranks", "<i4"),
    ]
)
assert HEADER_DTYPE.itemsize == HEADER_SIZE and RECORD_DTYPE.itemsize == RECORD_SIZE


class FileState(enum.IntEnum):
    """How recording ended (tprof.h ``enum tprof_state``)."""

    RECORDING = 0  # never closed: the process was killed (or _exit'ed) mid-window
    WINDOW_DONE = 1
    EXITED = 2  # exited normally before the window closed: data complete
    FULL = 3  # size cap reached: data complete up to the cap


class Kind(enum.IntEnum):
    SOCK_SEND = 1
    SOCK_RECV = 2
    ITER_MARK = 3
    NCCL_ALLREDUCE = 16
    NCCL_REDUCESCATTER = 17
    NCCL_ALLGATHER = 18
    NCCL_BROADCAST = 19
    NCCL_REDUCE = 20
    NCCL_SEND = 21
    NCCL_RECV = 22


NCCL_KINDS = tuple(k for k in Kind if k >= Kind.NCCL_ALLREDUCE)
FLAG_HEADER = 1


class RecordFileError(TeiresiasError):
    """A record file is missing, truncated or not a record file."""


@dataclass(frozen=True)
class RecordFile:
    path: Path
    state: FileState
    pid: int
    rank: int
    world_size: int
    local_rank: int
    host: str
    start_real_ns: int
    window_ns: int
    iterations: int
    dropped: int
    slurm_restart: int  # which run of the job wrote it (-1: unknown)
    elastic_restart: int
    records: np.ndarray  # RECORD_DTYPE, completed records only, in claim order

    @property
    def run(self) -> tuple[int, int]:
        """(Slurm requeue count, torchrun restart count): later runs sort higher."""
        return (self.slurm_restart, self.elastic_restart)

    @property
    def complete(self) -> bool:
        """False when the process died inside its window (data may stop mid-iteration)."""
        return self.state is not FileState.RECORDING

    def of_kind(self, *kinds: Kind) -> np.ndarray:
        return self.records[np.isin(self.records["kind"], [int(k) for k in kinds])]


def read_record_file(path: str | os.PathLike[str]) -> RecordFile:
    """Parse one ``.tprof`` file; raise RecordFileError naming what is wrong."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise RecordFileError(f"{p}: cannot read record file ({exc.strerror})") from exc
    if len(raw) < HEADER_SIZE:
        raise RecordFileError(f"{p}: truncated record file ({len(raw)} bytes, header is {HEADER_SIZE})")
    hdr = np.frombuffer(raw, HEADER_DTYPE, count=1)[0]
    if bytes(hdr["magic"]).ljust(8, b"\x00") != MAGIC:
        raise RecordFileError(f"{p}: not a teiresias profiler record file (bad magic)")
    if int(hdr["version"]) != VERSION or int(hdr["record_size"]) != RECORD_SIZE:
        raise RecordFileError(
            f"{p}: record file version {int(hdr['version'])} is not {VERSION}; re-profile with this teiresias version"
        )
    count = min(int(hdr["count"]), int(hdr["capacity"]))
    need = HEADER_SIZE + count * RECORD_SIZE
    if len(raw) < need:
        raise RecordFileError(
            f"{p}: truncated record file ({len(raw)} bytes, header promises {need}); the profile cannot be trusted"
        )
    try:
        state = FileState(int(hdr["state"]))
    except ValueError as exc:
        raise RecordFileError(f"{p}: unknown recording state {int(hdr['state'])}") from exc
    recs = np.frombuffer(raw, RECORD_DTYPE, count=count, offset=HEADER_SIZE).copy()
    # kind 0: a slot claimed but never published (the writer died inside the call).
    recs = recs[recs["kind"] != 0]
    return RecordFile(
        path=p,
        state=state,
        pid=int(hdr["pid"]),
        rank=int(hdr["rank"]),
        world_size=int(hdr["world_size"]),
        local_rank=int(hdr["local_rank"]),
        host=bytes(hdr["host"]).split(b"\x00", 1)[0].decode(errors="replace"),
        start_real_ns=int(hdr["start_real_ns"]),
        window_ns=int(hdr["window_ns"]),
        iterations=int(hdr["iterations"]),
        dropped=int(hdr["dropped"]),
        slurm_restart=int(hdr["slurm_restart"]),
        elastic_restart=int(hdr["elastic_restart"]),
        records=recs,
    )


def record_files(profile_dir: str | os.PathLike[str]) -> list[Path]:
    """The record files in a profile directory, sorted by name."""
    d = Path(profile_dir)
    if not d.is_dir():
        return []
    return sorted(q for q in d.iterdir() if q.name.endswith(SUFFIX))
