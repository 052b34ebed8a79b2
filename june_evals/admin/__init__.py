"""The evals in the admin: datasets and their cases (``evalpages``), runs side by side, and the
sessions' action that makes cases of chosen conversations."""

from june_evals.admin import evalpages  # noqa: F401 (registers the model admins)
