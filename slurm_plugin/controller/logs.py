"""The controller's log: one line per event, with its level (docs/admin.md "Logs").

On a terminal or in a file each line carries a dated timestamp
(``2026-11-27T12:41:00+0000 teiresias INFO [job 3] start: ...``). Under
systemd, whose journal stamps every line itself, a line is
``<6>INFO [job 3] start: ...``: the ``<N>`` syslog priority the journal reads
(``SyslogLevelPrefix=``, on by default) and no second timestamp; the journal
is recognised by ``$JOURNAL_STREAM`` naming this process's stderr
(systemd.exec(5)). A message never spans lines (a newline in one is shown as
`` | ``). A crash is one line naming a file that holds its traceback
(``crashed``); the traceback is also logged at debug level.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
# syslog(3) priorities: what the journal files a line under (journalctl -p).
_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}
ROOT = "teiresias"

log = logging.getLogger("teiresias.controller")


class _OneLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).replace("\n", " | ")


class JournalFormatter(_OneLine):
    """``<priority>LEVEL message``: the journal adds time, host and unit."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return f"<{_PRIORITY.get(record.levelno, 6)}>" + super().format(record)


class LineFormatter(_OneLine):
    """``2026-11-27T12:41:00+0000 teiresias LEVEL message``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s teiresias %(levelname)s %(message)s", datefmt="%Y-%m-%dT%H:%M:%S%z")


def under_journal(stream: TextIO, env: Mapping[str, str] | None = None) -> bool:
    """True when ``stream`` is the journal's stream systemd gave this service."""
    want = (os.environ if env is None else env).get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return bool(want) and want == f"{st.st_dev}:{st.st_ino}"


def setup_logging(level: str | int = "info", stream: TextIO | None = None) -> None:
    """Configured by the CLI, never at import: ``level`` a name of LEVELS or a number."""
    stream = sys.stderr if stream is None else stream
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JournalFormatter() if under_journal(stream) else LineFormatter())
    root = logging.getLogger(ROOT)
    root.handlers[:] = [handler]
    set_level(level)
    root.propagate = False


def set_level(level: str | int) -> None:
    logging.getLogger(ROOT).setLevel(LEVELS[level] if isinstance(level, str) else level)


def crashed(exc: BaseException, folder: Path | None) -> Path | None:
    """Log a crash as one line; its traceback goes to ``folder/crash-<time>-<pid>.txt``
    (named in that line) and to the debug level. Returns the file, or None when
    it could not be written (the line then says why)."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    path = None
    if folder is not None:
        path = folder / f"crash-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}.txt"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
        except OSError as err:
            where = f"traceback not saved ({err.strerror or err}); run with -v for it"
            path = None
        else:
            where = f"traceback in {path}"
    else:
        where = "run with -v for the traceback"
    log.critical("controller crashed: %s: %s; %s", type(exc).__name__, exc, where)
    log.debug("%s", text)
    return path
