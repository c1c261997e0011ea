"""The demo's workload and its comparison with the simulator (`teiresias demo`).

The workload is a fixed mix of short and long jobs of 1-8 GPUs arriving over
the first minute. Each job is a sleep job that *checkpoints its progress*:
it needs ``work`` seconds of service, counts them in its job directory, and
on the preemption signal writes its Ack (teiresias/jobfiles.py) and waits to
be requeued; the next run resumes from the saved count. So, like a real
training job, a preempted job loses at most a second of work, and its JCT is
comparable with the simulator's, which replays the same jobs (same submit
offsets, same service) under ``fifo`` and ``las`` on the same 4x4-GPU cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teiresias.domain import Cluster
from teiresias.jobfiles import format_comment

# The job script. JOBBASE (job directory base, also in the comment) and WORK
# (seconds of service) come from the environment sbatch exports.
DEMO_JOB = r"""#!/bin/bash
jobdir="$JOBBASE/$SLURM_JOB_ID"; mkdir -p "$jobdir"
done=$(cat "$jobdir/progress" 2>/dev/null || echo 0)
stopping=0
on_usr1() {
  stopping=1
  printf '{"job_id": %s, "restart_count": %s, "step": %s, "path": "%s/progress", "bytes": %s, "seconds": 0.0, "time": %s}' \
    "$SLURM_JOB_ID" "${SLURM_RESTART_COUNT:-0}" "$done" "$jobdir" "${#done}" "$(date +%s.%N)" > "$jobdir/ack.json.tmp"
  mv "$jobdir/ack.json.tmp" "$jobdir/ack.json"
}
trap on_usr1 USR1
while [ "$done" -lt "$WORK" ]; do
  sleep 1 & wait $!
  [ "$stopping" = 1 ] && continue   # checkpointed: wait for the requeue
  done=$((done + 1))
  echo "$done" > "$jobdir/progress.tmp" && mv "$jobdir/progress.tmp" "$jobdir/progress"
done
echo "job $SLURM_JOB_ID done after $done s of service (restarts: ${SLURM_RESTART_COUNT:-0})"
"""


@dataclass(frozen=True)
class DemoJob:
    index: int
    offset: float  # seconds after the demo's start when it is submitted
    gpus: int
    work: float  # seconds of service it needs
    kind: str  # "short" | "long"

    @property
    def gpu_seconds(self) -> float:
        return self.gpus * self.work


# (offset s, GPUs, work s): long multi-GPU jobs first, then a stream of short ones,
# the situation where 2D-LAS beats FIFO (Tiresias §2.3).
_MIX = [
    (0, 8, 90),
    (0, 4, 100),
    (2, 4, 80),
    (5, 2, 15),
    (8, 1, 10),
    (10, 8, 20),
    (15, 1, 12),
    (20, 2, 60),
    (25, 4, 15),
    (30, 1, 8),
    (35, 2, 10),
    (40, 8, 25),
]


def workload(scale: float = 1.0) -> list[DemoJob]:
    """The demo's jobs; ``scale`` shrinks offsets and service (tests use ~0.3)."""
    out = []
    for i, (off, g, w) in enumerate(_MIX):
        work = max(round(w * scale), 3)
        out.append(DemoJob(i, round(off * scale, 1), g, float(work), "long" if g * w >= 300 else "short"))
    return out


def demo_cluster(node_names: Sequence[str], gpus_per_node: int) -> Cluster:
    return Cluster.from_tiresias_spec(1, len(node_names), gpus_per_node, node_names=list(node_names))


def submit_demo_job(backend: Any, job: DemoJob, base: Path, name: str, gres: str | None = None) -> int:
    """Submit ``job`` as DEMO_JOB to partition gpu: ``--gpus=N``, or ``gres`` (``shard:1``) if
    given; its job directory (and output) under ``base``. The benchmarks' live runs."""
    return int(
        backend.submit(
            DEMO_JOB,
            "-p",
            "gpu",
            f"--gres={gres}" if gres else f"--gpus={job.gpus}",
            "-t",
            "30",
            f"--job-name={name}",
            f"--chdir={base}",
            f"--output={base}/{name[:1]}-%j.out",
            f"--comment={format_comment({'dir': str(base)})}",
            f"--export=ALL,JOBBASE={base},WORK={int(job.work)}",
        )
    )


@dataclass(frozen=True)
class SimJct:
    policy: str
    jct: dict[int, float]  # demo job index -> JCT (s)
    avg: float


def run_overhead(runs: Sequence[tuple[float, float, int]]) -> float:
    """Seconds a run of a job costs on top of its work: start-up, restore, checkpoint.

    ``runs`` holds (executed seconds over all runs, work seconds, number of runs)
    per finished job, read from the live controller's accounting; what the
    simulator must charge per run to compare like with like (it otherwise
    assumes jobs start and resume for free). Pooled: all the excess over all
    the runs. Slurm's start and end times are whole seconds, so one job's
    excess is off by up to a second either way; pooled, those errors cancel,
    where a per-job median clamped at 0 came out 0.0 or 1.0 s by chance on
    the same workload (docs/benchmarks.md, "Live vs simulated").
    """
    excess = sum(executed - work for executed, work, _ in runs)
    n = sum(max(k, 1) for _, _, k in runs)
    return max(excess / n, 0.0) if n else 0.0


def simulate(
    jobs: Sequence[DemoJob],
    cluster: Cluster,
    policy: str,
    queues: tuple[float, ...],
    interval: float,
    overhead: float = 0.0,
) -> SimJct:
    """The same workload under ``policy`` in the simulator (same policy objects as the controller).

    ``overhead`` (see :func:`run_overhead`) is added to every job's first run
    and charged again on each resume after a preemption.
    """
    from teiresias.policy.registry import PolicyParams, build_policy
    from teiresias.simulator import SimulationOptions, TraceJob, run

    trace = [
        TraceJob(job_id=j.index + 1, num_gpus=j.gpus, submit_time=j.offset, duration=j.work + overhead) for j in jobs
    ]
    result = run(
        trace,
        cluster,
        build_policy(policy, PolicyParams(queues=queues)),
        SimulationOptions(interval=interval, preempt_overhead=overhead, progress=False, record_timeline=False),
    )
    jct = {r.job_id - 1: r.jct for r in result.records}
    return SimJct(policy, jct, result.summary.avg_jct)
