"""SIGHUP (systemctl reload, the unit's ExecReload=) re-reads the configuration
and never ends the controller (issue 21 item 4: it died silently, and systemd
took the signal's death for a clean exit, so Restart=on-failure left it down)."""

from __future__ import annotations

import signal

import pytest
import yaml

from tests.helpers import poll

pytestmark = pytest.mark.slurm


def _reload(ctl, text: str) -> str:
    before = ctl.logtext().count("SIGHUP") + ctl.logtext().count("configuration reloaded")
    ctl.config.write_text(text)
    ctl.proc.send_signal(signal.SIGHUP)
    poll(
        "the reload's line",
        lambda: ctl.logtext().count("SIGHUP") + ctl.logtext().count("configuration reloaded") > before,
        30,
    )
    return [ln for ln in ctl.logtext().splitlines() if "SIGHUP" in ln or "configuration reloaded" in ln][-1]


def test_sighup_reloads_what_it_can_and_the_controller_carries_on(make_controller, tmp_path):
    ctl = make_controller().start()
    poll("the first round", lambda: "controller started" in ctl.logtext(), 60)
    cfg = yaml.safe_load(ctl.config.read_text())
    cfg.update(poll_interval=2, log_level="debug", state_db=str(tmp_path / "elsewhere.db"))
    cfg["policy"]["queues"] = [20]
    line = _reload(ctl, yaml.safe_dump(cfg))
    assert ctl.alive(), ctl.logtext()[-2000:]
    assert "INFO configuration reloaded" in line, line
    for key in ("policy.queues", "poll_interval", "log_level"):
        assert key in line.split(";")[0], line
    assert "state_db changed too, which takes a restart" in line, line
    poll("a debug line (log_level reloaded)", lambda: " DEBUG " in ctl.logtext(), 30)
    # a file that does not load is refused whole; the controller keeps its configuration
    line = _reload(ctl, "policy: {name: nosuch}\n")
    assert "ERROR SIGHUP:" in line and "policy.name" in line and "the configuration in force stays" in line, line
    assert ctl.alive()
    ctl.stop()
    assert ctl.proc.returncode == 0
