"""The soak's workload: a pure function of a seed (issue 20 A).

``generate(seed, ...)`` draws jobs from the everyday sbatch grammar (sizes of
1-16 GPUs as ``--gpus``, ``--gres``, ``-N``/``--gpus-per-node``,
``--gpus-per-task``; arrays with ``%N`` throttles and steps; dependencies;
``-H`` and later holds and releases by the owner or an admin; ``-w``/``-x``;
``--begin``; ``--no-requeue``; time limits that expire; typed GPU requests the
cluster lacks; hetjobs; cancels at random moments; jobs that change to 0 GPUs
while pending; an admin's ``scontrol requeue``; resumable and plain jobs of
several users) and faults
(controller ``kill -9``, slurmctld stop/start, node drain/resume, a rival
controller on another state DB), each at an offset from the start. Nothing
here reads a clock or the machine: the same arguments give the same
``Workload``, so a failing run is replayed exactly by its seed.

Every job's script decides its own end (an exit code, a sleep longer than its
time limit, a count of work seconds it resumes from), so the invariant checker
knows what each job asked for (``JobSpec.ends``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from slurm_plugin.controller.demo import DEMO_JOB

USERS = ("soak_u1", "soak_u2", "soak_u3")

# What a job's own script asks for at its end.
COMPLETED, FAILED, TIMEOUT = "COMPLETED", "FAILED", "TIMEOUT"

# Kinds of job and their weights in the mix (torch jobs are counted apart: they are few).
KINDS: dict[str, int] = {
    "plain": 40,  # sleep S; exit 0
    "short": 10,  # ends within a second: shorter than a poll
    "fail": 6,  # sleep S; exit E (E != 0): FAILED with that exit code
    "timeout": 2,  # sleeps past its 1-minute limit: TIMEOUT
    "resumable": 20,  # counts WORK seconds, checkpoints (Ack) on USR1, resumes
    "array": 7,  # --array=LO-HI[:STEP]%N of plain tasks
    "hetjob": 3,  # two components: runs as one, or is refused at submission with one line
    "typed": 4,  # a GPU type no node has: can never start
    "ungpu": 3,  # --gres=gpu:N, then `scontrol update gres=gpu:0` while pending: a CPU job
}
# GPUs per job and their weights (16 = the whole 4 x 4 cluster).
SIZES: dict[int, int] = {1: 28, 2: 22, 3: 6, 4: 18, 6: 4, 8: 12, 12: 4, 16: 6}
TYPED_FORMS = ("--gres=gpu:a100:{g}", "--gpus-per-node=v100:{g}", "--gpus=nosuchtype:{g}")
FAULTS = ("controller-kill9", "slurmctld-restart", "drain", "rival-controller")
# Every job but the time-limited ones gets this limit (minutes): long enough never to expire.
LIMIT_MIN = 30
# Offered load: GPU-seconds of work per GPU-second of the cluster during the submissions.
# Below 1 so that the queue drains soon after the last submission (2D-LAS still preempts:
# every new job outranks the ones that ran past the first threshold).
TARGET_LOAD = 0.9
# GPU-seconds of work a submission brings at scale 1 (measured: 67 +- 5 over 40 seeds of
# 400 jobs, array tasks counted; the 1-minute time limits are not scaled).
MEAN_GPU_S = 70.0


@dataclass(frozen=True)
class JobSpec:
    """One submission (an array or a hetjob is one submission). ``sbatch`` holds the
    grammar's options; the driver adds its own (job name, folders, comment)."""

    key: str  # "j12": the driver's name for it (also its --job-name)
    user: str
    kind: str  # a KINDS key, or "torch"
    gpus: int  # GPUs per job (per array task; a hetjob: all components together)
    sbatch: tuple[str, ...]
    script: str  # the batch script (sbatch reads it from stdin)
    ends: str = COMPLETED  # what the script asks for: COMPLETED | FAILED | TIMEOUT
    exit_code: int = 0
    work_s: float = 0.0  # seconds of service it needs (resumable: counted across runs)
    nodes: int | None = None  # -N
    per_node: int | None = None  # GPUs per node when the job asked per node
    required: tuple[str, ...] = ()  # -w
    excluded: tuple[str, ...] = ()  # -x
    begin_s: int | None = None  # --begin=now+N
    after: tuple[str, str] | None = None  # (afterok | afterany, key of an earlier job)
    tasks: tuple[int, ...] = ()  # array task ids
    components: tuple[int, ...] = ()  # a hetjob's GPUs per component (one node each)
    throttle: int | None = None  # the array's %N
    held: bool = False  # -H
    no_requeue: bool = False
    resumable: bool = False  # speaks the Ack protocol (tsbatch or the resumable shell job)
    runnable: bool = True  # False: asks for something the cluster never has (a GPU type)
    may_refuse: bool = False  # sbatch (job_submit.lua) may refuse it with one line
    tsbatch: bool = False  # submitted with tsbatch (a PyTorch job)

    @property
    def single_node(self) -> bool:
        return (self.nodes or 1) == 1 and self.kind != "hetjob"


@dataclass(frozen=True)
class Action:
    """``what``: submit | hold | release | cancel | ungpu | requeue | fault | fault-end.
    ``by``: owner | admin (holds, releases; a requeue is an admin's). ``fault``: a FAULTS name."""

    at: float  # seconds after the start of the run
    what: str
    key: str = ""
    by: str = ""
    fault: str = ""
    node: str = ""


@dataclass(frozen=True)
class Workload:
    seed: int
    duration_s: float
    nodes: tuple[str, ...]
    gpus_per_node: int
    jobs: dict[str, JobSpec] = field(default_factory=dict)  # in submission order
    actions: tuple[Action, ...] = ()  # sorted by offset
    args: dict[str, object] = field(default_factory=dict)  # generate()'s arguments: the same ones give this workload

    def count(self) -> dict[str, int]:
        """Submissions per kind, array tasks, faults (the summary's figures)."""
        out: dict[str, int] = {}
        for j in self.jobs.values():
            out[j.kind] = out.get(j.kind, 0) + 1
        out["array_tasks"] = sum(len(j.tasks) for j in self.jobs.values())
        out["faults"] = sum(1 for a in self.actions if a.what == "fault")
        return out


# ------------------------------------------------------------------ scripts
def plain_script(seconds: float, exit_code: int = 0) -> str:
    return f"#!/bin/bash\nsleep {seconds:g}\nexit {exit_code}\n"


def resumable_script(work: int) -> str:
    """The demo's checkpointing shell job (slurm_plugin/controller/demo.py): WORK
    seconds of service counted in its job folder under $SOAK_JOBBASE, Ack on USR1."""
    return DEMO_JOB.replace("#!/bin/bash\n", f'#!/bin/bash\nWORK={work}\nJOBBASE="$SOAK_JOBBASE"\n', 1)


# One thread; ~0.3 s per step; 2 epochs of 10 batches: a few seconds of training after torch's import.
TORCH_SCRIPT = (
    "#!/bin/bash\n"
    "export OMP_NUM_THREADS=1 TRAIN_EPOCHS=2 TRAIN_BATCHES=10 TRAIN_STEP_SLEEP=0.3\n"
    '/usr/bin/python3 "$SOAK_REPO/tests/fixtures/train_scripts/train_plain.py" "$SOAK_OUT/$SLURM_JOB_ID.pt"\n'
)


# ------------------------------------------------------------------ the generator
def _weighted(rng: random.Random, table: dict) -> object:
    keys = list(table)
    return rng.choices(keys, weights=[table[k] for k in keys])[0]


def _shape(rng: random.Random, gpus: int, nodes: int, gpn: int) -> tuple[tuple[str, ...], int | None, int | None]:
    """sbatch options for ``gpus`` GPUs in one of the grammar's forms: (args, -N, per node)."""
    if gpus <= gpn:
        form = rng.choice(("gpus", "G", "gres", "per-task", "per-node"))
        if form == "gpus":
            return (f"--gpus={gpus}",), None, None
        if form == "G":
            return ("-G", str(gpus)), None, None
        if form == "gres":
            return (f"--gres=gpu:{gpus}",), None, None
        if form == "per-task":
            return ("-n", str(gpus), "--gpus-per-task=1"), None, None
        return ("-N", "1", f"--gpus-per-node={gpus}"), 1, gpus
    splits = [n for n in range(2, nodes + 1) if gpus % n == 0 and gpus // n <= gpn]
    if splits and rng.random() < 0.5:
        n = rng.choice(splits)
        per = gpus // n
        opt = f"--gpus-per-node={per}" if rng.random() < 0.6 else f"--gres=gpu:{per}"
        return ("-N", str(n), opt), n, per
    return (f"--gpus={gpus}",), None, None


def _scale(jobs: int, duration_s: float, nodes: int, gpn: int) -> float:
    """Factor on every job's length so that the offered load is about TARGET_LOAD
    whatever ``jobs`` and ``duration_s``."""
    return max(0.05, min(1.0, TARGET_LOAD * nodes * gpn * duration_s / max(jobs * MEAN_GPU_S, 1.0)))


def generate(
    seed: int,
    *,
    duration_s: float = 120.0,
    jobs: int = 40,
    torch_jobs: int = 1,
    faults: int | None = None,
    fault_kinds: tuple[str, ...] = FAULTS,
    nodes: int = 4,
    gpus_per_node: int = 4,
    users: tuple[str, ...] = USERS,
) -> Workload:
    """The workload of ``seed``: ``jobs`` submissions (``torch_jobs`` of them PyTorch
    jobs through tsbatch) over ``duration_s`` seconds, and ``faults`` faults (default:
    one of each kind per 2.5 minutes, at least one of each) of ``fault_kinds`` on a
    ``nodes`` x ``gpus_per_node`` cluster. Pure: no clock, no I/O."""
    rng = random.Random(seed)
    names = tuple(f"node{i}" for i in range(1, nodes + 1))
    total = nodes * gpus_per_node
    sizes = {g: w for g, w in SIZES.items() if g <= total}
    scale = _scale(jobs, duration_s, nodes, gpus_per_node)
    offsets = sorted(rng.uniform(0.0, duration_s * 0.9) for _ in range(jobs))
    torch_at = set(rng.sample(range(jobs), min(torch_jobs, jobs)))
    specs: dict[str, JobSpec] = {}
    actions: list[Action] = []
    submitted: list[tuple[float, JobSpec]] = []

    def length(lo: float, hi: float) -> int:
        return max(1, round(rng.uniform(lo, hi) * scale))

    for i, at in enumerate(offsets):
        key = f"j{i + 1}"
        user = rng.choice(users)
        kind = "torch" if i in torch_at else str(_weighted(rng, KINDS))
        if kind == "timeout" and at > duration_s / 2:
            kind = "plain"  # a 1-minute limit (plus Slurm's timeout sweep) must expire before the run ends
        gpus = int(_weighted(rng, sizes))  # type: ignore[call-overload]
        args, n_nodes, per = _shape(rng, gpus, nodes, gpus_per_node)
        kw: dict = {}
        limit = LIMIT_MIN
        if kind in ("plain", "ungpu"):
            secs = length(2, 30)
            script = plain_script(secs)
            kw["work_s"] = secs
            if kind == "ungpu":
                gpus = min(gpus, gpus_per_node)
                args, n_nodes, per = (f"--gres=gpu:{gpus}",), None, None
        elif kind == "short":
            secs = rng.choice((0, 0.5, 1))
            script = plain_script(secs)
            kw["work_s"] = secs
        elif kind == "fail":
            code = rng.randint(1, 5)
            secs = length(1, 15)
            script = plain_script(secs, code)
            kw.update(ends=FAILED, exit_code=code, work_s=secs)
        elif kind == "timeout":
            script = plain_script(3600)
            limit = 1
            kw.update(ends=TIMEOUT, work_s=60)
        elif kind == "resumable":
            work = length(5, 40)
            script = resumable_script(work)
            kw.update(work_s=work, resumable=True)
        elif kind == "torch":
            gpus = min(gpus, 2)
            args, n_nodes, per = (f"--gpus={gpus}",), None, None
            script = TORCH_SCRIPT
            kw.update(resumable=True, tsbatch=True, work_s=20)
        elif kind == "array":
            gpus = min(gpus, gpus_per_node)
            args, n_nodes, per = (f"--gpus={gpus}",), None, None
            count, step = rng.randint(2, 6), rng.choice((1, 1, 2))
            throttle = rng.randint(1, 2)
            lo = rng.randint(0, 3)
            tasks = tuple(range(lo, lo + count * step, step))
            spec = f"{tasks[0]}-{tasks[-1]}" + (f":{step}" if step > 1 else "") + f"%{throttle}"
            secs = length(3, 15)
            script = plain_script(secs)
            args = (*args, f"--array={spec}")
            kw.update(tasks=tasks, throttle=throttle, work_s=secs)
        elif kind == "hetjob":
            a = rng.randint(1, gpus_per_node)
            b = rng.randint(1, gpus_per_node)
            gpus = a + b
            secs = length(3, 15)
            script = plain_script(secs)
            # sbatch's component separator; each component gets its own limit below
            args = ("-G", str(a), "-t", str(limit), ":", "-G", str(b))
            n_nodes, per = None, None
            kw.update(may_refuse=True, work_s=secs, components=(a, b))
        elif kind == "typed":
            g = min(gpus, gpus_per_node)
            args = (rng.choice(TYPED_FORMS).format(g=g),)
            gpus, n_nodes, per = g, None, None
            script = plain_script(5)
            kw.update(runnable=False, may_refuse=True, work_s=5)
        else:  # pragma: no cover - KINDS and this chain are kept in step
            raise AssertionError(kind)
        opts = list(args)
        single = (n_nodes or 1) == 1 and gpus <= gpus_per_node and kind not in ("hetjob", "typed")
        # user intent: node lists, begin times, holds, requeue, dependencies
        if single and kind != "array" and rng.random() < 0.06:
            node = rng.choice(names)
            opts += ["-w", node]
            kw["required"] = (node,)
        elif (
            kind not in ("hetjob", "typed")
            and gpus <= total - gpus_per_node
            and (n_nodes or 1) < nodes
            and rng.random() < 0.06
        ):
            node = rng.choice(names)
            opts += ["-x", node]
            kw["excluded"] = (node,)
        if kind not in ("typed", "hetjob") and rng.random() < 0.05:
            begin = rng.randint(10, 40)
            opts.append(f"--begin=now+{begin}")
            kw["begin_s"] = begin
        if kind in ("plain", "short", "fail") and rng.random() < 0.08:
            opts.append("--no-requeue")
            kw["no_requeue"] = True
        recent = [s for t, s in submitted if at - t < 60 and s.kind not in ("hetjob", "typed", "array")]
        if recent and kind not in ("hetjob", "array") and rng.random() < 0.08:
            dep = rng.choice(recent)
            how = "afterok" if rng.random() < 0.7 else "afterany"
            opts.append(f"--dependency={how}:{{{dep.key}}}")  # the driver puts in the job id
            kw["after"] = (how, dep.key)
        held = kind != "hetjob" and rng.random() < 0.05
        if held:
            opts.append("-H")
            kw["held"] = True
            if rng.random() < 0.8:
                actions.append(Action(at + rng.uniform(5, 30), "release", key, by="owner"))
        opts += ["-t", str(limit)]  # a hetjob's last component: the first got its own above
        spec_ = JobSpec(
            key=key,
            user=user,
            kind=kind,
            gpus=gpus,
            sbatch=tuple(opts),
            script=script,
            nodes=n_nodes,
            per_node=per,
            **kw,
        )
        specs[key] = spec_
        submitted.append((at, spec_))
        actions.append(Action(at, "submit", key))
        # later actions of users and admins
        if not held and kind not in ("hetjob", "array") and rng.random() < 0.08:
            by = "owner" if rng.random() < 0.6 else "admin"
            t = at + rng.uniform(1, 30)
            actions.append(Action(t, "hold", key, by=by))
            if rng.random() < 0.8:
                actions.append(Action(t + rng.uniform(5, 25), "release", key, by=by))
        if kind == "ungpu":
            actions.append(Action(at + rng.uniform(0.5, 3), "ungpu", key))
        if kind not in ("hetjob", "array", "typed") and rng.random() < 0.04:
            # an admin's `scontrol requeue` of the job, running by then or not (one more requeue path)
            actions.append(Action(at + rng.uniform(5, 40), "requeue", key, by="admin"))
        if rng.random() < 0.07:
            actions.append(Action(at + rng.uniform(0, 40), "cancel", key))

    fk = tuple(f for f in FAULTS if f in fault_kinds)  # FAULTS' order: the same draws for the same kinds
    n_faults = max(len(fk), round(duration_s / 150 * len(fk))) if faults is None else faults
    kinds = list(fk) * (n_faults // max(len(fk), 1)) + rng.sample(fk, n_faults % len(fk)) if fk else []
    rng.shuffle(kinds)
    # Faults do not overlap: each gets its own slot of the run's middle 80%.
    slot = duration_s * 0.8 / max(len(kinds), 1)
    for k, fault in enumerate(kinds):
        start = duration_s * 0.1 + k * slot + rng.uniform(0, slot * 0.3)
        down = {
            "controller-kill9": (3, 10),
            "slurmctld-restart": (2, 8),
            "drain": (10, 30),
            "rival-controller": (8, 15),
        }
        lo, hi = down[fault]
        length_s = min(rng.uniform(lo, hi), slot * 0.6)
        node = rng.choice(names) if fault == "drain" else ""
        actions.append(Action(start, "fault", fault=fault, node=node))
        actions.append(Action(start + length_s, "fault-end", fault=fault, node=node))
    ordered = tuple(sorted(actions, key=lambda a: (a.at, a.what != "submit")))
    args: dict[str, object] = {
        "seed": seed,
        "duration_s": duration_s,
        "jobs": jobs,
        "torch_jobs": torch_jobs,
        "faults": faults,
        "fault_kinds": list(fk),
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
    }
    return Workload(seed, duration_s, names, gpus_per_node, specs, ordered, args)
