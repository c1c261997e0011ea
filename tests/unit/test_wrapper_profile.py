"""tsbatch's profiling wiring (Tiresias §3.3.1): GPU counting from sbatch
options, the default decision against a real ProfileStore, the generated
batch script (golden file) and, run under bash, the profiler environment on
the first run only."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

import profiler
from profiler.aggregate import Profile
from profiler.store import ProfileStore, model_key
from teiresias.errors import ConfigError
from tests.unit.test_wrapper_tsbatch import SETUP as TSBATCH_SETUP
from wrappers import profiling
from wrappers.batchscript import JobSetup, render
from wrappers.gpu_count import requested_gpus
from wrappers.sbatch_args import parse
from wrappers.tsbatch import HOOK_SITE, _header_words, _job_name, _profiling, _setup

HERE = Path(__file__).resolve().parent
GOLDEN = HERE.parent / "fixtures" / "train_scripts" / "tsbatch_golden_profile.sh"
VALID = Profile(
    valid=True,
    layer="gloo",
    ranks=2,
    iterations=10,
    collectives_per_iteration=10,
    bytes_per_iteration=1e6,
    model_bytes=1e6,
    period_s=0.1,
    intensity_bps=1e7,
    skew=0.7,
    skew_source="traffic",
    traffic_skew=0.7,
    traffic_skew_valid=True,
)


# ----------------------------------------------------------------- GPU counting


@pytest.mark.parametrize(
    "cli, header, want",
    [
        (["-G", "2"], [], 2),
        (["-G2"], [], 2),
        (["--gpus=a100:3"], [], 3),
        (["--gpus", "4"], [], 4),
        (["--gpus-per-n=2", "-N", "2"], [], 4),  # getopt abbreviation of --gpus-per-node
        (["--gres=gpu:2"], [], 2),
        (["--gres=gpu:a100:2", "-N", "2"], [], 4),
        (["--gres=gpu"], [], 1),
        (["--gres=gres/gpu:2,mps:100"], [], 2),
        (["--gres=mps:100"], [], 0),
        (["--gpus-per-node=2", "--nodes=3"], [], 6),
        (["--gpus-per-node=2", "-N", "2-4"], [], 4),  # the minimum of a range
        (["--gpus-per-task=1", "-n", "4"], [], 4),
        (["--gpus-per-task=2", "--ntasks-per-node=2", "-N2"], [], 8),
        (["--gpus-per-task=2"], [], 2),  # one task by default
        (["-c", "4", "--mem=1G"], [], 0),
        ([], ["-G", "2"], 2),  # #SBATCH lines count
        (["-G", "1"], ["-G", "4"], 1),  # the command line wins over #SBATCH
        ([], ["--gpus-per-node=4", "-N", "2"], 8),
        (["-N", "2"], ["--gpus-per-node=4"], 8),  # mixed sources
        (["-vG", "2"], [], 2),  # a flag bundled before the value option
        (["--gpus=x"], [], 0),  # unreadable: sbatch will say so
    ],
)
def test_requested_gpus(cli, header, want):
    assert requested_gpus(header, cli) == want


def test_requested_gpus_from_input_environment():
    assert requested_gpus([], [], {"SBATCH_GPUS": "3"}) == 3
    assert requested_gpus(["-G", "8"], [], {"SBATCH_GPUS": "3"}) == 3  # env beats #SBATCH
    assert requested_gpus([], ["-G", "1"], {"SBATCH_GPUS": "3"}) == 1  # the command line beats env


def test_gpus_counted_from_a_real_command_line_and_script():
    p = parse(["-J", "vgg", "-N", "2", "job.sh", "--gpus=99"])  # script arguments are not sbatch's
    header = _header_words("#!/bin/bash\n#SBATCH --gpus-per-node=2  # two per node\nsrun x\n")
    assert requested_gpus(header, p.sbatch_opts) == 4


# ----------------------------------------------------------------- the decision


def env_with_store(tmp_path: Path, profiled: tuple[str, ...] = ()) -> dict[str, str]:
    store = ProfileStore(tmp_path / "profiles")
    for i, name in enumerate(profiled):
        store.put(model_key(name), VALID, 100 + i)
    return {profiling.ENV_STORE: str(store.root), profiling.ENV_CONFIG: str(tmp_path / "absent.yaml")}


def test_default_on_for_multi_gpu_unprofiled_model(tmp_path):
    d = profiling.decide(None, 2, "vgg", env_with_store(tmp_path, profiled=("resnet",)))
    assert d.profile and "not profiled" in d.why


def test_default_off_for_a_profiled_model(tmp_path):
    assert not profiling.decide(None, 4, "vgg", env_with_store(tmp_path, profiled=("vgg",))).profile


def test_an_invalid_profile_does_not_count_as_profiled(tmp_path):
    env = env_with_store(tmp_path)
    ProfileStore(env[profiling.ENV_STORE]).put(model_key("vgg"), Profile(valid=False, reason="killed"), 7)
    assert profiling.decide(None, 2, "vgg", env).profile


def test_default_off_for_one_gpu_and_cpu_jobs(tmp_path):
    env = env_with_store(tmp_path)
    assert not profiling.decide(None, 1, "vgg", env).profile
    assert not profiling.decide(None, 0, "vgg", env).profile


@pytest.mark.parametrize("explicit", [True, False])
def test_explicit_flags_win(tmp_path, explicit):
    env = env_with_store(tmp_path, profiled=("vgg",))
    for gpus, name in [(1, "vgg"), (4, "vgg"), (4, "new")]:
        assert profiling.decide(explicit, gpus, name, env).profile is explicit


def test_unreadable_store_means_not_profiled(tmp_path):
    env = env_with_store(tmp_path, profiled=("vgg",))
    for f in (Path(env[profiling.ENV_STORE]) / "by-model").iterdir():
        f.write_text('{"key": "model:vgg", "profile": {"valid": tru')  # truncated
    assert profiling.decide(None, 2, "vgg", env).profile
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert profiling.decide(None, 2, "vgg", {profiling.ENV_STORE: str(blocker / "store")}).profile


def test_store_found_through_the_controller_config(tmp_path):
    store = tmp_path / "state" / "profiles"  # the default: <state_db folder>/profiles
    ProfileStore(store).put(model_key("vgg"), VALID, 1)
    cfg = tmp_path / "teiresias.yaml"
    cfg.write_text(yaml.safe_dump({"state_db": "state/state.db"}))
    assert profiling.store_root({profiling.ENV_CONFIG: str(cfg)}) == store
    assert not profiling.decide(None, 2, "vgg", {profiling.ENV_CONFIG: str(cfg)}).profile


def test_bad_controller_config_is_one_warning_and_not_profiled(tmp_path, capsys):
    cfg = tmp_path / "teiresias.yaml"
    cfg.write_text("no_such_key: 1\n")
    assert profiling.decide(None, 2, "vgg", {profiling.ENV_CONFIG: str(cfg)}).profile
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "warning" in err[0] and "no_such_key" in err[0]


def test_both_flags_is_bad_input():
    with pytest.raises(ConfigError, match="only one of --profile and --no-profile"):
        _setup(parse(["--profile", "--no-profile", "job.sh"]), {})


def test_bad_window_is_bad_input():
    with pytest.raises(ConfigError, match="TEIRESIAS_PROFILE_SECONDS"):
        _setup(parse(["job.sh"]), {profiling.ENV_SECONDS: "soon"})
    with pytest.raises(ConfigError, match="seconds must be > 0"):
        _setup(parse(["job.sh"]), {profiling.ENV_SECONDS: "0"})


def test_model_key_is_the_job_name_tsbatch_submits(tmp_path):
    text = "#!/bin/bash\n#SBATCH -J from-header\nx\n"
    header = _header_words(text)
    assert _job_name(parse(["-J", "cli", "train.sh"]), header, {}) == "cli"
    assert _job_name(parse(["train.sh"]), header, {"SBATCH_JOB_NAME": "env"}) == "env"
    assert _job_name(parse(["train.sh"]), header, {}) == "from-header"
    assert _job_name(parse(["dir/train.sh"]), [], {}) == "train.sh"
    assert _job_name(parse(["--wrap=x"]), [], {}) == "wrap"


def test_profiling_decision_gives_the_interposer(tmp_path):
    env = env_with_store(tmp_path, profiled=("done",))
    on, lib = _profiling(parse(["-J", "new", "-G", "2", "t.sh"]), env, [], "new")
    assert on and lib == str(profiler.library_path())
    assert _profiling(parse(["-J", "done", "-G", "2", "t.sh"]), env, [], "done") == (False, None)
    assert _profiling(parse(["-G", "1", "t.sh"]), env, [], "t.sh") == (False, None)


# ----------------------------------------------------------------- the batch script

USER = "#!/bin/bash\n#SBATCH --gpus=2\ntorchrun --nproc-per-node=2 train.py\n"
# tsbatch's golden setup, profiled, with a site spool
SETUP = replace(
    TSBATCH_SETUP, profile=True, profile_lib="/opt/teiresias/profiler/_tprof.so", spool="/var/spool/teiresias"
)


def test_profiled_script_matches_golden_file():
    got = render(USER, SETUP)
    if os.environ.get("TEIRESIAS_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text(), (
        "the generated batch script changed; if intended, rerun with TEIRESIAS_UPDATE_GOLDEN=1 "
        f"and review the diff of {GOLDEN.name}"
    )
    assert subprocess.run(["bash", "-n"], input=got, text=True, check=False).returncode == 0


def test_unprofiled_script_has_no_profiler_lines():
    got = render(USER, JobSetup(SETUP.hook_site, SETUP.base, 0, False, 90))
    assert "LD_PRELOAD" not in got and "TEIRESIAS_PROFILE_DIR" not in got
    assert "export TEIRESIAS_PROFILE=0" in got


# The user's script: what a training process would see, and whether the
# sitecustomize installed the profiler's model hook (its import finder).
SHOW = """#!/bin/bash
echo "preload=$LD_PRELOAD"
echo "dir=${{TEIRESIAS_PROFILE_DIR:-unset}}"
echo "window=${{TEIRESIAS_PROFILE_SECONDS:-unset}}/${{TEIRESIAS_PROFILE_ITERS:-unset}}"
{python} -c "import sys; print('hook=%s' % any(type(f).__name__ == '_Finder' for f in sys.meta_path))"
"""


def run_batch(tmp_path: Path, env_extra: dict[str, str], lib: str | None = None) -> tuple[dict[str, str], str]:
    setup = JobSetup(
        str(HOOK_SITE),
        str(tmp_path / "base"),
        0,
        True,
        90,
        profile_lib=lib or str(profiler.library_path()),
        window=profiling.window_from_env({profiling.ENV_SECONDS: "5", profiling.ENV_ITERS: "12"}),
    )
    script = tmp_path / "batch.sh"
    script.write_text(render(SHOW.format(python=sys.executable), setup))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TEIRESIAS_", "LD_PRELOAD"))}
    env.update({"SLURM_JOB_ID": "4242", "LD_PRELOAD": "libm.so.6", "TMPDIR": str(tmp_path)}, **env_extra)
    r = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    got = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    return got, r.stderr


@pytest.mark.parametrize("restart", [None, "0"])
def test_first_run_gets_the_profiler(tmp_path, restart):
    got, _ = run_batch(tmp_path, {} if restart is None else {"SLURM_RESTART_COUNT": restart})
    assert got["preload"] == f"libm.so.6:{profiler.library_path()}"  # appended
    assert got["dir"] == str(tmp_path / "base" / "4242" / "profile")
    assert got["window"] == "5.0/12"
    assert got["hook"] == "True"


def test_requeued_run_is_not_profiled(tmp_path):
    got, _ = run_batch(tmp_path, {"SLURM_RESTART_COUNT": "1", "TEIRESIAS_PROFILE_DIR": "/stale"})
    assert got["preload"] == "libm.so.6"
    assert got["dir"] == "unset" and got["hook"] == "False"


def test_missing_library_on_the_node_is_one_warning(tmp_path):
    got, err = run_batch(tmp_path, {}, lib=str(tmp_path / "gone" / "_tprof.so"))
    ours = [ln for ln in err.splitlines() if "teiresias" in ln]
    assert len(ours) == 1 and "not profiled" in ours[0]
    assert got["dir"] == "unset" and got["hook"] == "False"


def test_model_hook_installed_where_teiresias_is_not(tmp_path):
    """A job's own interpreter without teiresias installed: the sitecustomize
    loads profiler/model_hook.py by path (it needs only the standard library)."""
    python = Path("/usr/bin/python3")
    probe = "import importlib.util as u; print(u.find_spec('profiler') is None)"
    if (
        not python.exists()
        or subprocess.run(
            [str(python), "-c", probe],
            capture_output=True,
            text=True,
            check=False,
            env={"PATH": "/usr/bin:/bin"},
            cwd=tmp_path,
        ).stdout.strip()
        != "True"
    ):
        pytest.skip("needs a system python3 without teiresias")
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(HOOK_SITE),
        "TEIRESIAS_PROFILE": "1",
        "TEIRESIAS_PROFILE_DIR": str(tmp_path / "profile"),
    }
    show = (
        "import sys; print(type(sys.meta_path[0]).__name__, '_teiresias_model_hook' in sys.modules,"
        " 'profiler' in sys.modules)"
    )
    r = subprocess.run([str(python), "-c", show], env=env, capture_output=True, text=True, check=False, cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.split() == ["_Finder", "True", "False"]
