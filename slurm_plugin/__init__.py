"""The live side of teiresias: Slurm backends, the controller daemon and the
local Slurm cluster used by the demo and the tests."""
