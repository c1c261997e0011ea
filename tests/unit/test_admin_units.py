"""The shipped service units and logrotate snippet (etc/systemd, etc/logrotate;
docs/admin.md), checked by the real tools: ``systemd-analyze verify`` and
``logrotate`` (installed with apt-get as root when missing, as in CI).
"""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
from pathlib import Path

from slurm_plugin.controller.audit import AuditLog, read_audit
from tests.debian_packages import require_program

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "etc" / "systemd"
ACTIVE = UNITS / "teiresias-controller.service"
STANDBY = UNITS / "teiresias-controller-standby.service"
LOGROTATE = ROOT / "etc" / "logrotate" / "teiresias"
INSTALLED = "/opt/teiresias/bin/teiresias"  # where docs/admin.md installs the console script


def _unit(path: Path) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None, comment_prefixes=("#", ";"))
    cp.optionxform = str  # systemd keys are case-sensitive
    cp.read_string(path.read_text(encoding="utf-8"))
    return cp


def test_units_verify_with_systemd_analyze(tmp_path: Path) -> None:
    analyze = require_program("systemd-analyze", "systemd")
    # verify insists that ExecStart's program exists. The units name the
    # documented install path; here it is swapped for this checkout's own
    # console script (the same entry point pip puts there), nothing else.
    venv_script = Path(sys.executable).parent / "teiresias"
    assert venv_script.exists(), venv_script
    copies = []
    for unit in (ACTIVE, STANDBY):
        text = unit.read_text(encoding="utf-8")
        assert text.count(INSTALLED) == 1, f"{unit.name}: ExecStart should name {INSTALLED} once"
        copy = tmp_path / unit.name
        copy.write_text(text.replace(INSTALLED, str(venv_script)), encoding="utf-8")
        copies.append(str(copy))
    res = subprocess.run([analyze, "verify", *copies], capture_output=True, text=True, timeout=120)
    # A warning (an unknown key, a misspelt section) exits 0 too: stderr must be empty.
    assert res.returncode == 0 and res.stderr.strip() == "", res.stderr


def test_units_are_hardened_as_docs_admin_md_scores_them(tmp_path: Path) -> None:
    """Issue 21 item 6: systemd's own reading of the units, offline (no running systemd
    needed): 8.9 EXPOSED before; docs/admin.md "Hardening" states the score."""
    import re

    analyze = require_program("systemd-analyze", "systemd")
    documented = re.search(r"\*\*(\d+\.\d) OK\*\*", (ROOT / "docs" / "admin.md").read_text(encoding="utf-8"))
    assert documented, "docs/admin.md states the score as **N.N OK**"
    venv_script = Path(sys.executable).parent / "teiresias"
    for unit in (ACTIVE, STANDBY):
        copy = tmp_path / unit.name
        copy.write_text(unit.read_text(encoding="utf-8").replace(INSTALLED, str(venv_script)), encoding="utf-8")
        res = subprocess.run(
            [analyze, "security", "--offline=true", "--no-pager", str(copy)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        m = re.search(r"Overall exposure level for \S+: (\d+\.\d) (\w+)", res.stdout)
        assert m, res.stdout[-2000:] + res.stderr
        assert float(m.group(1)) <= float(documented.group(1)) and m.group(2) == "OK", (unit.name, m.group(0))
        svc = _unit(unit)["Service"]
        assert svc["ProtectHome"] == "yes" and svc["CapabilityBoundingSet"] == "" and svc["ProtectSystem"] == "strict"


def test_units_run_the_controller_as_its_service_user_and_restart_on_failure() -> None:
    active, standby = _unit(ACTIVE)["Service"], _unit(STANDBY)["Service"]
    for svc in (active, standby):
        assert svc["User"] == "teiresias" and svc["Group"] == "teiresias"  # docs/admin.md step 3
        assert svc["Restart"] == "on-failure"
        # Bad input (exit 2) is not retried: the configuration must be fixed first.
        assert svc["RestartPreventExitStatus"] == "2"
        assert svc["StateDirectory"] == "teiresias" and svc["LogsDirectory"] == "teiresias"
        # systemctl reload: SIGHUP re-reads the configuration (issue 21 item 4)
        assert svc["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert active["ExecStart"].split() == [INSTALLED, "controller", "run", "--config", "/etc/teiresias/teiresias.yaml"]
    # The standby runs the very same controller and configuration, plus --standby.
    assert standby["ExecStart"].split() == active["ExecStart"].split() + ["--standby"]


def test_unit_paths_match_the_example_configuration() -> None:
    """StateDirectory/LogsDirectory create the folders of etc/teiresias.yaml's
    state_db and audit_log for the controller's user; the logrotate snippet
    rotates that audit log."""
    import yaml

    conf = yaml.safe_load((ROOT / "etc" / "teiresias.yaml").read_text(encoding="utf-8"))
    assert Path(conf["state_db"]).parent == Path("/var/lib/teiresias")
    assert Path(conf["audit_log"]).parent == Path("/var/log/teiresias")
    assert LOGROTATE.read_text(encoding="utf-8").count(conf["audit_log"] + " {") == 1


def test_logrotate_rotates_a_live_audit_log_without_holes(tmp_path: Path) -> None:
    """The real logrotate on the shipped snippet (path and ``su`` user swapped
    for a temporary folder and the current user) while the controller's
    AuditLog keeps its file open: the rotated copy holds the old lines, and
    the next line lands at the start of the truncated file (copytruncate +
    O_APPEND), so the log stays valid JSON lines."""
    logrotate = require_program("logrotate", "logrotate")
    logdir = tmp_path / "log"
    logdir.mkdir(mode=0o700)
    audit = logdir / "audit.jsonl"
    import grp
    import pwd

    user = pwd.getpwuid(os.geteuid()).pw_name
    group = grp.getgrgid(os.getegid()).gr_name
    text = LOGROTATE.read_text(encoding="utf-8")
    assert "su teiresias teiresias" in text
    conf = tmp_path / "teiresias.logrotate"
    conf.write_text(
        text.replace("/var/log/teiresias/audit.jsonl", str(audit)).replace(
            "su teiresias teiresias", f"su {user} {group}"
        ),
        encoding="utf-8",
    )

    log = AuditLog(audit)
    try:
        for i in range(50):
            log.write(i, "start", "before rotation", detail="x" * 40)
        size_before = audit.stat().st_size
        res = subprocess.run(
            [logrotate, "--force", "--state", str(tmp_path / "state"), str(conf)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
        rotated = logdir / "audit.jsonl.1"
        assert rotated.exists(), sorted(p.name for p in logdir.iterdir())
        assert [e["job"] for e in read_audit(rotated)] == list(range(50))
        log.write(99, "hold", "after rotation")
    finally:
        log.close()
    data = audit.read_bytes()
    assert b"\0" not in data and len(data) < size_before
    assert [json.loads(line)["job"] for line in data.decode().splitlines()] == [99]
