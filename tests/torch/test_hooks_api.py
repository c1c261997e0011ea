"""The explicit API, the site hook's manners (chaining, no torch no change),
and what the hooks do before training starts."""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.torch.jobs import HOOK_SITE, PYTHON, job_env, last_step, plain_env, preempt, run, same_weights, start

pytestmark = pytest.mark.torch


def test_api_steps_and_register_resume_bitwise(tmp_path):
    ref, out, log = tmp_path / "ref.pt", tmp_path / "out.pt", tmp_path / "run.log"
    r = run("train_api.py", [str(ref)], plain_env())  # the API is inert without tsbatch
    assert r.returncode == 0, r.stderr
    base = tmp_path / "jobs"
    proc = start("train_api.py", [str(out)], job_env(base, 21, TRAIN_STEP_SLEEP="0.03"), log)
    ack = preempt(proc, log, base / "21", 10)
    assert last_step(log) - ack["step"] <= 1
    r = run("train_api.py", [str(out)], job_env(base, 21, 1))
    assert r.returncode == 0, r.stderr
    assert f"resumed at {ack['step']}" in r.stdout
    assert r.stdout.splitlines()[1] == f"step {ack['step'] + 1}"  # the step iterator went on from there
    assert same_weights(ref, out)  # model and the registered EMA model


def _py(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_site_hook_chains_the_sitecustomize_it_shadows(tmp_path):
    other = tmp_path / "site2"
    other.mkdir()
    (other / "sitecustomize.py").write_text("print('the other sitecustomize ran')\n")
    env = job_env(tmp_path / "jobs", 22)
    env["PYTHONPATH"] = f"{HOOK_SITE}:{other}"
    r = _py("print('main')", env)
    assert (r.returncode, r.stdout, r.stderr) == (0, "the other sitecustomize ran\nmain\n", "")


def test_script_without_torch_is_untouched(tmp_path):
    code = "import sys, json; print(json.dumps(sorted(m for m in sys.modules if 'torch' in m)))"
    hooked, plain = _py(code, job_env(tmp_path / "jobs", 23)), _py(code, plain_env())
    assert (hooked.returncode, hooked.stdout, hooked.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert hooked.stdout == "[]\n"
    assert not (tmp_path / "jobs").exists()


def test_sigterm_before_training_kills_as_usual(tmp_path):
    env = job_env(tmp_path / "jobs", 24)
    proc = subprocess.Popen(
        [PYTHON, "-c", "import torch, sys, time; print('ready', flush=True); time.sleep(60)"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert not (tmp_path / "jobs" / "24" / "checkpoints").exists()
