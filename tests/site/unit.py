"""A systemd service unit run without systemd, as far as a machine without it
allows: the unit's own ``User=``/``Group=``, ``Environment=``, ``UMask=``,
the folders of ``StateDirectory=``/``LogsDirectory=``/``RuntimeDirectory=``
made for that user with their modes, ``ExecStart=`` as its command line and
``ExecReload=``'s signal. Paths move under a root folder (``/var/lib/x`` ->
``ROOT/var/lib/x``), the documented install paths are swapped for this test's
(``swap``); sandboxing keys (``Protect*``, ``SystemCallFilter``, ...) need
systemd and are checked by ``systemd-analyze`` instead (tests/unit/test_admin_units.py).
"""

from __future__ import annotations

import configparser
import os
import pwd
import shlex
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

# systemd's environment for a service: no login shell, a fixed PATH (systemd.exec(5)).
SERVICE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass
class Unit:
    path: Path
    service: dict[str, str]
    overrides: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Unit:
        cp = configparser.ConfigParser(strict=False, interpolation=None, comment_prefixes=("#", ";"))
        cp.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
        cp.read_string(path.read_text(encoding="utf-8"))
        return cls(path, dict(cp["Service"]))

    def get(self, key: str, default: str = "") -> str:
        return self.overrides.get(key, self.service.get(key, default))

    def command(self, key: str, swap: dict[str, str]) -> list[str]:
        line = self.get(key)
        for old, new in swap.items():
            line = line.replace(old, new)
        return shlex.split(line)

    def folders(self, root: Path) -> dict[str, Path]:
        """State/Logs/Runtime folders, made for the unit's user with the unit's modes."""
        pw = pwd.getpwnam(self.get("User"))
        out = {}
        for key, base in (("StateDirectory", "var/lib"), ("LogsDirectory", "var/log"), ("RuntimeDirectory", "run")):
            name = self.get(key)
            if not name:
                continue
            d = root / base / name
            d.mkdir(parents=True, exist_ok=True)
            os.chown(d, pw.pw_uid, pw.pw_gid)
            os.chmod(d, int(self.get(key + "Mode", "0755"), 8))
            out[key] = d
        return out

    def environment(self) -> dict[str, str]:
        env = {"PATH": SERVICE_PATH, "LANG": "C.UTF-8"}
        pw = pwd.getpwnam(self.get("User"))
        env.update(USER=pw.pw_name, LOGNAME=pw.pw_name, HOME=pw.pw_dir, SHELL=pw.pw_shell)
        for item in shlex.split(self.get("Environment")):
            key, _, value = item.partition("=")
            env[key] = value
        return env

    def start(self, swap: dict[str, str], log: Path, extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        """``ExecStart=`` as the unit's user and group (no supplementary groups but the
        user's own, as systemd gives them), stdout and stderr to ``log`` (the journal)."""
        pw = pwd.getpwnam(self.get("User"))
        group = self.get("Group") or pw.pw_name
        import grp

        gid = grp.getgrnam(group).gr_gid
        umask = int(self.get("UMask", "0022"), 8)
        return subprocess.Popen(
            self.command("ExecStart", swap),
            user=pw.pw_uid,
            group=gid,
            extra_groups=os.getgrouplist(pw.pw_name, gid),
            umask=umask,
            env={**self.environment(), **(extra_env or {})},
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=open(log, "ab"),
            stderr=subprocess.STDOUT,
        )

    def reload(self, proc: subprocess.Popen) -> None:
        """``ExecReload=``: the shipped unit's is ``kill -HUP $MAINPID``."""
        line = self.get("ExecReload")
        assert "-HUP $MAINPID" in line, f"{self.path.name}: ExecReload= should send SIGHUP to the main process"
        proc.send_signal(signal.SIGHUP)

    def stop(self, proc: subprocess.Popen, timeout: float = 30) -> int:
        """``KillSignal=`` then, after ``TimeoutStopSec=``, SIGKILL."""
        proc.send_signal(getattr(signal, self.get("KillSignal", "SIGTERM")))
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(10)
