"""Debian packages a test needs (systemd-analyze, logrotate, chromium).

CI runs on a clean Debian 12 as root, so a missing package is installed with
apt-get there, the same way scripts/bootstrap.sh installs the compiler. As a
non-root user the test is skipped with the package to install named: it
cannot be checked without the real program, and faking it would prove nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def require_program(program: str, package: str) -> str:
    """Path of ``program``; installs Debian's ``package`` first when missing (root only)."""
    found = shutil.which(program)
    if found:
        return found
    if os.geteuid() != 0:
        pytest.skip(f"{program} missing: apt-get install {package} (as root) to run this test")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package]):
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if res.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.strip()[-500:]}")
    found = shutil.which(program)
    if not found:
        pytest.fail(f"apt-get installed {package} but {program} is still not on PATH")
    return found
