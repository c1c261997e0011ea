"""teiresias: Tiresias / HiveD scheduling for Slurm GPU clusters.

Folders:
  teiresias/domain     typed vocabulary (Job, Cluster, Placement, Snapshot, Plan)
  teiresias/policy     pure scheduling and placement policies (snapshot in, Plan out)
  teiresias/simulator  trace-driven simulator that runs the same policies
  teiresias/cells      HiveD buddy-cell virtual clusters
  slurm_plugin         the live controller, Slurm backends and the local test cluster
  wrappers             tsbatch and the in-job checkpoint/resume hooks
  profiler             LD_PRELOAD communication profiler and its aggregator
"""

__version__ = "0.1.0"
