# The real local Slurm, shared with tests/slurm_integration.
from tests.slurm_integration.conftest import minicluster, slurm  # noqa: F401
