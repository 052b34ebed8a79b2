"""The host project with a user model keyed by a string (``str_accounts.Member``) instead of a
big integer: everything else as ``settings``."""

from hostproject import settings as base
from hostproject.settings import *  # noqa: F403

INSTALLED_APPS = ["hostproject.str_accounts" if app == "hostproject.accounts" else app for app in base.INSTALLED_APPS]
AUTH_USER_MODEL = "str_accounts.Member"
