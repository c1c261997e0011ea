"""slurmrestd backend: openapi v0.0.38 over a unix socket with rest_auth/local.

The same operations as the CLI backend, as HTTP calls. Slurm reports most
failures as HTTP 200 with a non-empty ``errors`` array, so every answer's
``errors`` is checked, not only the status code. Start a slurmrestd with
``teiresias cluster up --restd`` (socket ``DIR/run/slurmrestd.sock``).
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

from slurm_plugin.backends.base import HOLD_MARK, JobTarget, SlurmBackend, SlurmJob, SlurmNode
from slurm_plugin.backends.parse import (
    error_from_message,
    parse_jobs_payload,
    parse_nodes_payload,
)
from teiresias.errors import JobVanished, SlurmError, SlurmUnreachable

API = "/slurm/v0.0.38"


def restd_error_text(errors: list[dict[str, Any]]) -> str:
    """slurmrestd's errors array -> one line with Slurm's own words first
    (``error`` holds e.g. "Invalid job id specified", ``description`` the context)."""
    parts = []
    for e in errors[:2]:
        words = e.get("error") or ""
        desc = e.get("description") or ""
        parts.append(f"{words}: {desc}" if words and desc else (words or desc or json.dumps(e)))
    return "; ".join(parts)


class _UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over AF_UNIX: the ``curl --unix-socket`` of the standard library."""

    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


def unix_http(path: str, method: str, url: str, body: Any = None, timeout: float = 10.0) -> tuple[int, bytes]:
    """One HTTP request over a unix socket; returns (status, body). Raises OSError
    when the socket does not answer."""
    conn = _UnixHTTPConnection(path, timeout)
    try:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method, url, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class RestdBackend(SlurmBackend):
    """Talks to slurmrestd on ``socket_path`` (rest_auth/local: the peer's uid is the user)."""

    name = "restd"

    def __init__(self, socket_path: str, timeout: float = 10.0):
        self.socket_path = str(socket_path)
        self.timeout = timeout

    # ---------------------------------------------------------------- transport
    def _call(self, method: str, path: str, body: Any = None, job_id: JobTarget | None = None) -> dict:
        try:
            status, raw = unix_http(self.socket_path, method, API + path, body, self.timeout)
        except (OSError, http.client.HTTPException) as exc:
            raise SlurmUnreachable(
                f"slurmrestd at {self.socket_path} does not answer ({exc}); "
                "start it with `teiresias cluster up --restd`"
            ) from None
        try:
            payload = json.loads(raw or b"{}")
        except ValueError:
            raise SlurmError(f"slurmrestd {method} {path}: HTTP {status}, not JSON: {raw[:120]!r}") from None
        errors = payload.get("errors") or []
        if errors:
            raise error_from_message(restd_error_text(errors), job_id)
        if status >= 400:
            if job_id is not None and status == 404:
                raise JobVanished(f"job {job_id}: slurmrestd answers 404")
            raise SlurmError(f"slurmrestd {method} {path}: HTTP {status}")
        return payload

    def _update(self, job_id: JobTarget, fields: dict[str, Any]) -> None:
        # v0.0.38 POST /job/{id} takes the job description at top level
        self._call("POST", f"/job/{job_id}", fields, job_id)

    # ---------------------------------------------------------------- reads
    def jobs(self) -> list[SlurmJob]:
        return parse_jobs_payload(self._call("GET", "/jobs"))

    def nodes(self) -> list[SlurmNode]:
        return parse_nodes_payload(self._call("GET", "/nodes"))

    def ping(self) -> bool:
        try:
            payload = self._call("GET", "/ping")
        except SlurmError:
            return False
        return any(p.get("ping") == "UP" for p in payload.get("pings", []))

    # ---------------------------------------------------------------- actions
    def hold(self, job_id: JobTarget, admin_comment: str | None = None) -> None:
        """A plain hold, without the controller's mark (see set_hold_mark)."""
        self._update(job_id, {"hold": True})

    def set_hold_mark(self, job_id: JobTarget, on: bool, admin_comment: str | None = None) -> None:
        # v0.0.38 answers 'Unknown key "admin_comment"' (tests/slurm/test_backend_restd.py)
        raise SlurmError(
            f"job {job_id}: slurmrestd's openapi v0.0.38 cannot write AdminComment, where the"
            f" controller marks its holds ({HOLD_MARK}); run the controller with backend: cli"
        )

    def release(self, job_id: JobTarget) -> None:
        self._update(job_id, {"hold": False})

    def set_priority(self, job_id: JobTarget, priority: int) -> None:
        self._update(job_id, {"priority": int(priority)})

    def set_nodelist(self, job_id: JobTarget, nodes: tuple[str, ...]) -> None:
        # job updates take sbatch's option names: "nodelist" is --nodelist,
        # "nodes" is --nodes (a count range), set with it as in the CLI backend
        n = len(nodes)
        self._update(job_id, {"nodelist": ",".join(nodes), "nodes": f"{n}-{n}"} if nodes else {"nodelist": ""})

    def signal(self, job_id: JobTarget, signal: str, scope: str = "full") -> None:
        if scope != "full":
            raise SlurmError(
                f"slurmrestd's openapi v0.0.38 signals the whole job only, not {scope}:"
                " use the CLI backend (backend: cli)"
            )
        # 22.05's DELETE /job/{id}?signal= reaches the batch shell and its
        # children, like `scancel --signal --full` (tests/slurm/test_backend_restd.py)
        self._call("DELETE", f"/job/{job_id}?signal={signal.upper().removeprefix('SIG')}", None, job_id)

    def requeue(self, job_id: JobTarget, hold: bool = True) -> None:
        raise SlurmError(
            "requeue is not in slurmrestd's openapi v0.0.38: use the CLI backend "
            "(backend: cli) where the controller preempts"
        )

    def clear_begin_time(self, job_id: JobTarget) -> None:
        self._update(job_id, {"begin_time": "now"})

    def cancel(self, job_id: JobTarget) -> None:
        self._call("DELETE", f"/job/{job_id}", None, job_id)
