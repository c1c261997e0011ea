"""Install the Debian packages the local cluster needs, only when missing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from slurm_plugin.localcluster.errors import LocalClusterError

BASE_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
RESTD_PACKAGES = ("slurmrestd", "slurm-wlm-jwt-plugin")
# about 20 s and 190 MB more; only with `cluster up --accounting`
ACCOUNTING_PACKAGES = ("slurmdbd", "mariadb-server")
JOB_SUBMIT_LUA_SO = Path("/usr/lib/x86_64-linux-gnu/slurm-wlm/job_submit_lua.so")


def missing_packages(names: tuple[str, ...]) -> list[str]:
    missing = []
    for name in names:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True, check=False)
        if "install ok installed" not in r.stdout:
            missing.append(name)
    return missing


def ensure_packages(restd: bool, log=lambda msg: None, accounting: bool = False) -> list[str]:
    """apt-get install what is missing; returns the packages installed.

    Debian's postinst scripts start nothing on this kind of host (no systemd,
    policy-rc.d), so installing does not start a system-wide slurmctld.
    """
    wanted = BASE_PACKAGES + (RESTD_PACKAGES if restd else ()) + (ACCOUNTING_PACKAGES if accounting else ())
    try:
        missing = missing_packages(wanted)
    except FileNotFoundError:
        raise LocalClusterError(
            "dpkg-query not found: the local cluster needs a Debian/Ubuntu host "
            "(install slurmctld slurmd slurm-client munge yourself elsewhere)"
        ) from None
    if not missing:
        return []
    if os.geteuid() != 0:
        raise LocalClusterError(
            f"missing packages {' '.join(missing)}: run as root, or apt-get install {' '.join(missing)}"
        )
    log(f"installing {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # other sessions may run apt at the same moment: wait for the dpkg lock
    lock = ["-o", "DPkg::Lock::Timeout=300"]
    for cmd in (
        ["apt-get", *lock, "update", "-qq"],
        ["apt-get", *lock, "install", "-y", "-qq", "--no-install-recommends", *missing],
    ):
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if r.returncode != 0:
            tail = (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise LocalClusterError(f"{' '.join(cmd[:1] + cmd[3:4])} failed ({r.returncode}): {tail[0]}")
    still = missing_packages(wanted)
    if still:
        raise LocalClusterError(f"packages still missing after apt-get install: {' '.join(still)}")
    return missing
