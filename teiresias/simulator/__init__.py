"""Trace-driven simulator: replays a Tiresias trace under the real policy objects.

Python API (what the demo and the CLI call)::

    from teiresias.simulator import read_trace, run, SimulationOptions
    from teiresias.clusterspec import load_cluster
    from teiresias.policy.registry import build_policy, PolicyParams

    result = run(read_trace("trace.csv"), load_cluster("etc/cluster.yaml"),
                 build_policy("las", PolicyParams()), SimulationOptions(interval=60))
    result.summary.avg_jct, result.records[0].jct
"""

from teiresias.simulator.engine import SimulationError, SimulationOptions, Simulator, run
from teiresias.simulator.metrics import JobRecord, SimulationResult, Summary
from teiresias.simulator.slowdown import SlowdownTable, load_slowdown
from teiresias.simulator.trace import TraceJob, read_trace, write_trace

__all__ = [
    "JobRecord",
    "SimulationError",
    "SimulationOptions",
    "SimulationResult",
    "Simulator",
    "SlowdownTable",
    "Summary",
    "TraceJob",
    "load_slowdown",
    "read_trace",
    "run",
    "write_trace",
]
