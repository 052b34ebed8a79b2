"""The evals' rows: datasets and their cases, runs and their scored cases (``evalrows``)."""

from june_evals.models.evalrows import Dataset, EvalCase, EvalRun, Example  # noqa: F401
