"""The local Slurm cluster the project starts itself (demo and tests):
munged + slurmctld + one slurmd per node with fake GPUs, state under one
directory. See docs/local-cluster.md."""

from slurm_plugin.localcluster.cluster import ClusterStatus, LocalCluster, UpResult, client_env, config_from_dir
from slurm_plugin.localcluster.config import CLUSTER_NAME, DEFAULT_DIR, DEFAULT_PORT_BASE, ClusterConfig
from slurm_plugin.localcluster.errors import LocalClusterError

__all__ = [
    "CLUSTER_NAME",
    "ClusterConfig",
    "ClusterStatus",
    "LocalCluster",
    "LocalClusterError",
    "UpResult",
    "DEFAULT_DIR",
    "DEFAULT_PORT_BASE",
    "client_env",
    "config_from_dir",
]
