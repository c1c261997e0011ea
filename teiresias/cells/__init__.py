"""HiveD buddy-cell virtual clusters (OSDI'20) for Slurm.

Modules, one job each:
- ``model``: cell types, levels, the physical cell tree;
- ``config``: YAML loading and validation (etc/cells.example.yaml);
- ``buddy``: the buddy allocator (split on allocation, merge on release);
- ``vc``: virtual clusters and their lazy virtual -> physical binding;
- ``preempt``: GPU owners and the choice of opportunistic victims;
- ``faults``: bad nodes and the VCs' lost guarantee;
- ``rebind``: a valid binding restored (jobs migrated) when other VCs' bindings are in the way;
- ``world``: one round's cell state and the job -> cells rules;
- ``scheduler``: ``CellsPolicy``, the pure VC-aware SchedulingPolicy;
- ``quota``: the plain per-tenant GPU-quota baseline it is compared with;
- ``state``: the binding the controller persists between rounds;
- ``metrics`` / ``report``: fragmentation and what ``teiresias cells`` shows.
"""
