"""What the command line does with awkward input files and output paths
(teiresias/yamlconf.py, teiresias/outputs.py): one line, exit 2,
never a traceback; a UTF-8 byte-order mark is accepted; unknown keys in any
YAML configuration are named with the valid ones; outputs follow the umask,
never create folders, and the plot's format is the one its suffix names.

Everything runs through the real ``teiresias`` command group (click's runner)
or the real loaders, on real files."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_plugin.config import load_config
from teiresias.cells import config as cells_config
from teiresias.cli import cli
from teiresias.clusterspec import load_cluster
from teiresias.errors import ConfigError
from teiresias.simulator.slowdown import load_slowdown

ROOT = Path(__file__).resolve().parents[2]
BOM = b"\xef\xbb\xbf"
HEADER = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
TRACE = HEADER + "".join(
    f"{i},{1 + i % 2},{i * 10},1,{'vgg16' if i % 2 else 'resnet50'},{50 + 10 * i},0\n" for i in range(6)
)
SPEC_CSV = "num_switch,num_node_p_switch,num_gpu_p_node\n1,2,4\n"
SPEC_YAML = "gpus_per_node: 4\nswitches:\n  - name: s0\n    nodes: [n1, n2]\n"
SAMPLES = "duration\n" + "".join(f"{100 * k}\n" for k in range(1, 20))
SLOWDOWN = "models:\n  vgg16: {skew: 0.7, slowdown: 1.5}\n"
# 0xe9 is 'é' in Latin-1, the usual way a non-UTF-8 file reaches us.
LATIN1_TRACE = HEADER.encode() + b"0,1,0,1,r\xe9snet,10,0\n"


@pytest.fixture
def d(tmp_path: Path) -> Path:
    (tmp_path / "t.csv").write_text(TRACE)
    (tmp_path / "c.csv").write_text(SPEC_CSV)
    (tmp_path / "c.yaml").write_text(SPEC_YAML)
    (tmp_path / "s.csv").write_text(SAMPLES)
    return tmp_path


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def one_error_line(r) -> str:
    """The run failed with exit 2 and exactly one line, no traceback; that line."""
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1, r.output
    assert "Traceback" not in r.output
    return lines[0]


# -- item 22: encodings, byte-order marks, directories --------------------------------


def _commands(d: Path, bad: Path) -> dict[str, list[str]]:
    t, c = str(d / "t.csv"), str(d / "c.csv")
    return {
        "simulate -t": ["simulate", "-t", str(bad), "-c", c],
        "simulate -c (csv)": ["simulate", "-t", t, "-c", str(bad)],
        "simulate -c (yaml)": ["simulate", "-t", t, "-c", str(bad.with_suffix(".yaml"))],
        "simulate --slowdown": ["simulate", "-t", t, "-c", c, "--slowdown", str(bad.with_suffix(".yaml"))],
        "simulate -g": ["simulate", "-t", t, "-c", c, "-p", "gittins", "-g", str(bad)],
        "trace check": ["trace", "check", str(bad)],
        "trace synth -S": [
            "trace",
            "synth",
            "-k",
            "philly",
            "-n",
            "5",
            "-G",
            "8",
            "-S",
            str(bad),
            "-o",
            str(d / "o.csv"),
        ],
    }


@pytest.mark.parametrize("command", sorted(_commands(Path("."), Path("x.csv"))))
def test_non_utf8_input_is_one_line_naming_file_and_line(d, command):
    bad = d / "latin1.csv"
    bad.write_bytes(LATIN1_TRACE)
    bad.with_suffix(".yaml").write_bytes(b"# caf\xe9\nmodels: {}\n")
    line = one_error_line(run(*_commands(d, bad)[command]))
    target = bad.with_suffix(".yaml") if "yaml" in command or "slowdown" in command else bad
    want_line = 1 if target.suffix == ".yaml" else 2
    assert line.startswith(f"teiresias: error: {target}:{want_line}: not UTF-8 text (byte 0xe9)"), line
    assert "save the" in line and "as UTF-8" in line
    assert not (d / "o.csv").exists()


@pytest.mark.parametrize("command", sorted(_commands(Path("."), Path("x.csv"))))
def test_a_directory_given_as_an_input_file_says_so(d, command):
    folder = d / "folder.csv"
    folder.mkdir()
    folder.with_suffix(".yaml").mkdir()
    line = one_error_line(run(*_commands(d, folder)[command]))
    assert "is a directory" in line and "not found" not in line, line


def test_a_utf8_byte_order_mark_is_accepted_everywhere(d):
    for name in ("t.csv", "c.csv", "c.yaml", "s.csv"):
        p = d / name
        p.write_bytes(BOM + p.read_bytes())
    (d / "sd.yaml").write_bytes(BOM + SLOWDOWN.encode())
    r = run(
        "simulate",
        "-t",
        str(d / "t.csv"),
        "-c",
        str(d / "c.csv"),
        "-p",
        "gittins,las",
        "-g",
        str(d / "s.csv"),
        "--slowdown",
        str(d / "sd.yaml"),
        "--json",
        str(d / "o.json"),
    )
    assert r.exit_code == 0, r.output
    assert [s["jobs"] for s in json.loads((d / "o.json").read_text())] == [6, 6]
    assert run("simulate", "-t", str(d / "t.csv"), "-c", str(d / "c.yaml")).exit_code == 0
    r = run("trace", "check", str(d / "t.csv"), "--json")
    assert r.exit_code == 0 and json.loads(r.output)["jobs"] == 6
    r = run("trace", "synth", "-k", "philly", "-n", "5", "-G", "8", "-S", str(d / "s.csv"), "-o", str(d / "o.csv"))
    assert r.exit_code == 0, r.output
    assert load_slowdown(d / "sd.yaml").profile("VGG16").slowdown == 1.5
    conf = d / "teiresias.yaml"
    conf.write_bytes(BOM + b"policy: {name: fifo}\n")
    assert load_config(conf).policy.name == "fifo"


def test_crlf_line_ends_are_read_like_lf(d):
    (d / "crlf.csv").write_bytes(TRACE.replace("\n", "\r\n").encode())
    r = run("trace", "check", str(d / "crlf.csv"), "--json")
    assert r.exit_code == 0 and json.loads(r.output)["jobs"] == 6


# -- item 23: unknown keys, one format, types --------------------------------------------

UNKNOWN_KEY = re.compile(
    r"^(?P<file>\S+): unknown key '(?P<key>[^']+)'( \(did you mean '(?P<close>[^']+)'\?\))?; "
    r"valid keys( under (?P<under>\S+))? are: (?P<valid>.+)$"
)


@pytest.mark.parametrize(
    "text,key,close,valid",
    [
        ("modles:\n  vgg16: {skew: 0.7, slowdown: 1.5}\n", "modles", "models", "default, models, pack_overhead"),
        (
            "models:\n  vgg16: {skew: 0.7, slowdwn: 1.5}\n",
            "models.vgg16.slowdwn",
            "slowdown",
            "gpu_util, skew, slowdown",
        ),
        ("default: {skew: null, slowdown: 1.0, scale: 2}\n", "default.scale", None, "gpu_util, skew, slowdown"),
        # another file entirely: the cluster file given as the slowdown table
        (SPEC_YAML, "gpus_per_node", None, "default, models, pack_overhead"),
    ],
)
def test_slowdown_table_unknown_keys_are_named_with_the_valid_ones(d, text, key, close, valid):
    p = d / "sd.yaml"
    p.write_text(text)
    line = one_error_line(run("simulate", "-t", str(d / "t.csv"), "-c", str(d / "c.csv"), "--slowdown", str(p)))
    m = UNKNOWN_KEY.match(line.removeprefix("teiresias: error: "))
    assert m, line
    assert (m["file"], m["key"], m["close"], m["valid"]) == (str(p), key, close, valid)


@pytest.mark.parametrize(
    "text,problem",
    [
        ("models:\n  vgg16: {skew: 0.7, slowdown: fast}\n", "models.vgg16.slowdown: must be a number, got 'fast'"),
        ("models:\n  vgg16: {skew: true, slowdown: 1.2}\n", "models.vgg16.skew: must be a number, got True"),
        ("models:\n  vgg16: {skew: 1.7, slowdown: 1.2}\n", "models.vgg16.skew: must be <= 1.0, got 1.7"),
        ("models: [vgg16]\n", "models: must be a mapping"),
        ("models:\n  vgg16: 1.5\n", "models.vgg16: must be a mapping with keys gpu_util, skew, slowdown, got 1.5"),
    ],
)
def test_slowdown_table_types_are_checked(d, text, problem):
    p = d / "sd.yaml"
    p.write_text(text)
    line = one_error_line(run("simulate", "-t", str(d / "t.csv"), "-c", str(d / "c.csv"), "--slowdown", str(p)))
    assert line.startswith(f"teiresias: error: {p}: {problem}"), line


@pytest.mark.parametrize(
    "text,key,close",
    [
        ("gpus_per_node: 4\nswitchs:\n  - name: s0\n    nodes: [n1]\n", "switchs", "switches"),
        ("num_switch: 1\nnum_node_p_switch: 2\nnum_gpus_p_node: 4\n", "num_gpus_p_node", "num_gpu_p_node"),
        ("gpus_per_node: 4\nswitches:\n  - name: s0\n    node: [n1]\n", "switches[0].node", "nodes"),
        (
            "gpus_per_node: 4\nswitches:\n  - name: s0\n    nodes: [n1, {name: n2, gpu: 8}]\n",
            "switches[0].nodes[1].gpu",
            "gpus",
        ),
    ],
)
def test_cluster_yaml_names_the_unknown_key_instead_of_missing_ones(d, text, key, close):
    p = d / "bad.yaml"
    p.write_text(text)
    line = one_error_line(run("simulate", "-t", str(d / "t.csv"), "-c", str(p)))
    m = UNKNOWN_KEY.match(line.removeprefix("teiresias: error: "))
    assert m and m["key"] == key and m["close"] == close, line
    assert "missing" not in line


def test_cluster_yaml_nodes_must_be_a_list(d):
    p = d / "bad.yaml"
    p.write_text("gpus_per_node: 4\nswitches:\n  - name: s0\n    nodes: n1\n")
    line = one_error_line(run("simulate", "-t", str(d / "t.csv"), "-c", str(p)))
    assert "switches[0].nodes: must be a list" in line  # yamlconf's one format: FILE: key: problem


LOADERS = {
    "cluster.yaml": (load_cluster, "gpus_per_node: 4\nswitches: [{name: s0, nodes: [n1]}]\nswtich_speed: 10\n"),
    "slowdown.yaml": (load_slowdown, "model:\n  vgg16: {skew: 0.7, slowdown: 1.5}\n"),
    "teiresias.yaml": (load_config, "partitions: [gpu]\ntopology:\n  switchs: {s0: [node1]}\n"),
    "cells.yaml": (cells_config.load, (ROOT / "etc" / "cells.example.yaml").read_text() + "\nvirtual_cluster: {}\n"),
}


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_every_config_reports_unknown_keys_in_one_format(tmp_path, name):
    loader, text = LOADERS[name]
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        loader(p)
    msg = str(err.value)
    m = UNKNOWN_KEY.match(msg)
    assert m and m["file"] == str(p), msg
    assert m["key"] in {"swtich_speed", "model", "topology.switchs", "virtual_cluster"}, msg
    assert m["close"] in {"switches", "models", "virtual_clusters"}, msg


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_every_config_reports_encoding_and_yaml_errors_in_one_format(tmp_path, name):
    loader, _ = LOADERS[name]
    p = tmp_path / name
    p.write_bytes(b"a: 1\n# \xff\n")
    with pytest.raises(ConfigError, match=re.escape(f"{p}:2: not UTF-8 text (byte 0xff)")):
        loader(p)
    p.write_text("a: [1,\n")
    with pytest.raises(ConfigError, match=re.escape(f"{p}:2: is not valid YAML")):
        loader(p)


# -- item 24: output files ----------------------------------------------------------------


def test_outputs_refuse_a_missing_folder_before_simulating(d):
    missing = d / "nonexist" / "x.json"
    line = one_error_line(run("simulate", "-t", str(d / "t.csv"), "-c", str(d / "c.csv"), "--json", str(missing)))
    assert line == (
        f"teiresias: error: {missing}: folder {missing.parent} does not exist; create it first or write elsewhere"
    )
    assert not missing.parent.exists()
    # Checked before the run: the summary table was not printed.
    for opt in ("--jobs-csv", "--plot"):
        r = run("simulate", "-t", str(d / "t.csv"), "-c", str(d / "c.csv"), opt, str(d / "no" / "x.png"))
        assert "does not exist" in one_error_line(r) and not (d / "no").exists()
    r = run("trace", "synth", "-o", str(d / "nonexist" / "t.csv"))
    assert "does not exist" in one_error_line(r) and not (d / "nonexist").exists()


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_output_files_follow_the_umask(d, mask, mode):
    old = os.umask(mask)
    try:
        r = run(
            "simulate",
            "-t",
            str(d / "t.csv"),
            "-c",
            str(d / "c.csv"),
            "--json",
            str(d / "o.json"),
            "--jobs-csv",
            str(d / "o.csv"),
            "--plot",
            str(d / "o.png"),
        )
        assert r.exit_code == 0, r.output
        assert run("trace", "synth", "-o", str(d / "synth.csv")).exit_code == 0
    finally:
        os.umask(old)
    for name in ("o.json", "o.csv", "o.png", "synth.csv"):
        assert (d / name).stat().st_mode & 0o777 == mode, name


@pytest.mark.parametrize("name,magic", [("p.svg", b"<?xml"), ("p.pdf", b"%PDF"), ("p.PNG", b"\x89PNG")])
def test_plot_format_follows_the_suffix(d, name, magic):
    r = run("simulate", "-t", str(d / "t.csv"), "-c", str(d / "c.csv"), "--plot", str(d / name))
    assert r.exit_code == 0, r.output
    assert (d / name).read_bytes().startswith(magic)


@pytest.mark.parametrize(
    "name,problem", [("p.txt", "unknown image format '.txt'"), ("plot", "no suffix to name the image format")]
)
def test_plot_with_an_unknown_format_is_refused_before_simulating(d, name, problem):
    line = one_error_line(run("simulate", "-t", str(d / "t.csv"), "-c", str(d / "c.csv"), "--plot", str(d / name)))
    assert f"--plot {d / name}: {problem}; end the name with one of: " in line and ".png" in line and ".svg" in line
    assert not (d / name).exists()


# -- item 25: `teiresias demo` checks everything before it starts a cluster ---------------
# Each case fails before any Slurm daemon starts (the demo's folder is never
# created); the ports given are this project's test range, so a regression
# that did start a cluster would not land on someone else's.


def test_demo_refuses_an_unknown_policy_before_starting_anything(tmp_path):
    d = tmp_path / "demo"
    r = CliRunner().invoke(cli, ["demo", "-p", "nosuch", "--dir", str(d), "--port-base", "17716"])
    assert r.exit_code == 2, r.output
    assert "'nosuch' is not one of 'fifo', 'best-effort'" in r.output and "Traceback" not in r.output
    assert not d.exists()


def test_demo_refuses_a_folder_whose_parent_is_missing(tmp_path):
    """Issue 21 item 8: `demo --dir /nonexistent/deep` created the whole tree."""
    d = tmp_path / "nonexistent" / "deep"
    r = CliRunner().invoke(cli, ["demo", "--dir", str(d), "--port-base", "17716"])
    assert one_error_line(r).startswith(f"teiresias: error: --dir {d}: its parent folder {d.parent} does not exist")
    assert not d.parent.exists()


def test_demo_honours_the_cluster_directory_and_port_variables(tmp_path):
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("")
    r = CliRunner().invoke(
        cli, ["demo"], env={"TEIRESIAS_CLUSTER_DIR": str(a_file), "TEIRESIAS_CLUSTER_PORT_BASE": "17716"}
    )
    assert one_error_line(r) == (
        f"teiresias: error: --dir {a_file}: exists and is not a directory; "
        "choose another path (or unset TEIRESIAS_CLUSTER_DIR)"
    )
    d = tmp_path / "demo"
    r = CliRunner().invoke(cli, ["demo"], env={"TEIRESIAS_CLUSTER_DIR": str(d), "TEIRESIAS_CLUSTER_PORT_BASE": "70000"})
    assert "--port-base must leave room for 5 ports in 1024..65535, got 70000" in one_error_line(r)
    assert not d.exists()
    r = CliRunner().invoke(cli, ["demo", "--help"])
    assert "TEIRESIAS_CLUSTER_DIR" in r.output and "TEIRESIAS_CLUSTER_PORT_BASE" in r.output


# -- item 26: tsbatch's own help never depends on Slurm -------------------------------------
# Real subprocesses of the installed entry points, with a real sbatch (when
# installed) that cannot find its configuration.


def _tsbatch(cmd: list[str], env: dict[str, str]):
    import subprocess
    import sys

    exe = str(Path(sys.executable).with_name(cmd[0]))
    return subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, env=env, timeout=60)


def _env_without_slurm(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return {**env, **extra}


@pytest.mark.parametrize("cmd", [["tsbatch", "--help"], ["tsbatch", "-h"], ["teiresias", "sbatch", "--help"]])
def test_tsbatch_help_with_slurm_conf_pointing_nowhere(cmd, tmp_path):
    missing = tmp_path / "nowhere" / "slurm.conf"
    r = _tsbatch(cmd, _env_without_slurm(SLURM_CONF=str(missing)))
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.startswith("Usage: tsbatch") and "--checkpoint-dir" in r.stdout
    # One line says why sbatch's part is missing, instead of sbatch's own retries (a minute) and errors.
    assert r.stdout.rstrip().splitlines()[-1] == (
        f"(sbatch's own help is unavailable here: SLURM_CONF={missing} does not exist; "
        "point it at the cluster's slurm.conf)"
    )
    assert "sbatch: error" not in r.stdout and "sbatch: fatal" not in r.stdout


@pytest.mark.skipif(Path("/etc/slurm/slurm.conf").exists(), reason="this machine has a default slurm.conf")
@pytest.mark.parametrize(
    "args,first",
    [
        (["--help"], "Usage: tsbatch"),
        (["--usage"], "Usage: tsbatch"),
        (["--version"], "tsbatch (teiresias "),
        (["-V"], "tsbatch (teiresias "),
    ],
)
def test_tsbatch_informational_flags_without_any_slurm_configuration(args, first):
    import shutil

    r = _tsbatch(["tsbatch", *args], _env_without_slurm())
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.startswith(first)
    # sbatch's four lines about DNS SRV lookups never reach the user.
    assert "resolve_ctls_from_dns_srv" not in r.stdout and "DNS" not in r.stdout
    last = r.stdout.rstrip().splitlines()[-1]
    if shutil.which("sbatch"):
        assert last.endswith(
            "is unavailable here: no Slurm configuration found; set SLURM_CONF to the cluster's slurm.conf)"
        ), last
