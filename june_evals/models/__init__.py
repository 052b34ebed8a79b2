"""The evals' rows: datasets and their cases, runs and their scored cases (``evalrows``), and
the versions of agents they run (``versions``)."""

from june_evals.models.evalrows import Dataset, EvalCase, EvalRun, Example, ExampleFile  # noqa: F401
from june_evals.models.versions import AgentVersion  # noqa: F401
