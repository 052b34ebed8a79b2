"""``AgentVersion``: an agent as an eval runs it, which no folder of the site is."""

from __future__ import annotations

from django.db import models


class AgentVersion(models.Model):
    """An agent at a git revision (its folder's files, kept here), or with a model of the run's
    choosing (a cassette's recordings, a script's replies), or both — named ``<agent>@<id>``.
    Its turns' session rows name it, and every process (the workers) loads it by that name from
    this row: the files are unpacked under ``JUNE_VAR_DIR``, nothing is asked of the repository
    again. The same version asked for twice is one row (``name`` is a digest of what it is)."""

    name = models.CharField(max_length=64, unique=True)
    #: the agent it is a version of (the site's folder of that name, unless ``files``)
    agent = models.CharField(max_length=64)
    #: the revision as asked (``HEAD~3``), the commit it named, the folder's path in the repository
    rev = models.CharField(max_length=200, blank=True, default="")
    sha = models.CharField(max_length=64, blank=True, default="")
    folder = models.CharField(max_length=500, blank=True, default="")
    #: the agent folder at ``sha``, a tar archive (empty: the site's folder)
    files = models.BinaryField(blank=True, default=b"")
    #: the model: ``{}`` (the agent's own), ``{"cassette": name, "interactions": [...]}``,
    #: ``{"script": name, "replies": [...]}`` or ``{"script": "package.module:function"}``
    model = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name
