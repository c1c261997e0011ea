"""``python -m teiresias.data``: where the shipped samples are (for scripts and pip installs)."""

from teiresias.data import PHILLY_SAMPLES, PHILLY_SAMPLES_1000

print(PHILLY_SAMPLES)
print(PHILLY_SAMPLES_1000)
