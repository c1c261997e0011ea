"""The job-files contract under its first name.

It now lives in teiresias/jobfiles.py, on the lowest floor, so that the
controller and the profiler read job files without importing wrappers/
(docs/architecture.md). Job-side code written against ``wrappers.protocol``
(docs/checkpointing.md) keeps working: every public name is re-exported here.
New names go into teiresias/jobfiles.py.
"""

from teiresias.jobfiles import *  # noqa: F403  (the re-export is this module's purpose)
