"""Public data shipped with teiresias (see ATTRIBUTION.txt beside this file).

``PHILLY_SAMPLES``: job GPU-time samples (GPU-seconds, one ``duration``
column) from Microsoft's Philly cluster, 9,999 of them: the GPU-time
distribution for ``teiresias trace synth --kind philly --samples`` and
2D-Gittins (``simulate --gittins-samples``, the controller's
``policy.gittins_samples``). ``PHILLY_SAMPLES_1000``: the 1,001-sample file
the reference Tiresias simulator reads. ``CLUSTER_N32G4``: that simulator's
128-GPU cluster spec (32 nodes x 4 GPUs), the cluster of docs/simulator.md.

In a clone they are ``teiresias/data/yarn-gput10000.csv`` and
``teiresias/data/yarn-gput1000.csv``; installed, print their paths with
``python -m teiresias.data``.
"""

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent
PHILLY_SAMPLES = DATA_DIR / "yarn-gput10000.csv"
PHILLY_SAMPLES_1000 = DATA_DIR / "yarn-gput1000.csv"
CLUSTER_N32G4 = DATA_DIR / "n32g4.csv"
