"""The machine-wide users of the site tests (tests/site/, and the unit tests of
the control channel): ``site_svc`` runs the controller as a site's service user
would, ``site_u1`` and ``site_u2`` submit jobs from their default private homes.
Made here when missing (idempotent, root only), never removed: another test
session on this machine may be using them."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

SERVICE = "site_svc"
USERS = ("site_u1", "site_u2")
READERS = "site_users"  # file_group: the users who may run `teiresias queue`, and the service user


def ensure_user(name: str) -> pwd.struct_passwd:
    """``useradd -m`` once; the home made private (0700) as a site's default would be."""
    if os.geteuid() != 0:
        pytest.skip("making test users needs root")
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        r = subprocess.run(["useradd", "-m", "-s", "/bin/bash", name], capture_output=True, text=True)
        if r.returncode not in (0, 9):  # 9: made meanwhile by another test process
            raise AssertionError(f"useradd {name}: {r.stderr.strip()}") from None
        pw = pwd.getpwnam(name)
    Path(pw.pw_dir).mkdir(mode=0o700, exist_ok=True)
    os.chown(pw.pw_dir, pw.pw_uid, pw.pw_gid)
    os.chmod(pw.pw_dir, 0o700)
    return pw


def ensure_group(name: str, members: Sequence[str]) -> None:
    """A group with (at least) these members, made when missing."""
    import grp

    if os.geteuid() != 0:
        pytest.skip("making test groups needs root")
    try:
        grp.getgrnam(name)
    except KeyError:
        r = subprocess.run(["groupadd", name], capture_output=True, text=True)
        if r.returncode not in (0, 9):
            raise AssertionError(f"groupadd {name}: {r.stderr.strip()}") from None
    for m in members:
        ensure_user(m)
        subprocess.run(["usermod", "-a", "-G", name, m], check=True)


def run_as(
    name: str, cmd: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 60, **kw
) -> subprocess.CompletedProcess[str]:
    """``cmd`` as user ``name`` (its uid and groups, as a login gives them), from its home."""
    pw = ensure_user(name)
    base = {"HOME": pw.pw_dir, "USER": name, "LOGNAME": name, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return subprocess.run(
        list(cmd),
        user=pw.pw_uid,
        group=pw.pw_gid,
        extra_groups=os.getgrouplist(name, pw.pw_gid),
        env={**base, **(env or {})},
        cwd=kw.pop("cwd", pw.pw_dir),
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def _reachable(name: str, path: str) -> bool:
    try:
        return run_as(name, [path, "-c", "pass"], timeout=60).returncode == 0
    except PermissionError:
        return False


def shared_python(root: Path) -> Path:
    """A Python with this checkout's packages (torch included) that other users can
    run: the test's own interpreter when they can reach it (a system Python, as on
    CI), else a venv of the system Python whose one .pth adds this venv's packages
    (made in ``root`` once; the interpreter of a pyenv in /root is out of their
    reach). Its bin/ has ``teiresias`` and ``tsbatch``, as an install would."""
    here = Path(sys.executable)
    if _reachable(SERVICE, str(here)) and os.access(here.with_name("tsbatch"), os.X_OK):
        return here
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = Path("/usr/bin") / version
    if not system.exists():
        pytest.skip(f"no {system} that other users can run (the test's Python is out of their reach)")
    venv = root / "python"
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([str(system), "-m", "venv", "--without-pip", str(venv)], check=True)
        site = venv / "lib" / version / "site-packages"
        ours = sysconfig.get_paths()["purelib"]
        (site / "teiresias-checkout.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
        for name, target in (("teiresias", "teiresias.cli"), ("tsbatch", "wrappers.tsbatch")):
            script = venv / "bin" / name
            script.write_text(f"#!{py}\nimport sys\nfrom {target} import main\nsys.exit(main())\n")
            script.chmod(0o755)
    os.chmod(root, 0o755)
    return py


@contextmanager
def open_tmp(prefix: str = "site-test-") -> Iterator[Path]:
    """A scratch folder other users can reach (pytest's tmp_path is root's, 0700)."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        subprocess.run(["rm", "-rf", str(d)], check=False)
