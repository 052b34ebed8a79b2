"""A user model keyed by a string, logging in by email (``settings_str``): June stores and compares
its users' keys whatever their type."""

import secrets

from django.contrib.auth.models import AbstractBaseUser, BaseUserManager, PermissionsMixin
from django.db import models


class MemberManager(BaseUserManager):
    def create_user(self, email, password=None, **extra):
        member = self.model(email=self.normalize_email(email), **extra)
        member.set_password(password)
        member.save(using=self._db)
        return member


def new_handle() -> str:
    return "m-" + secrets.token_hex(6)


class Member(AbstractBaseUser, PermissionsMixin):
    id = models.CharField(primary_key=True, max_length=40, default=new_handle, editable=False)
    email = models.EmailField(unique=True)
    is_active = models.BooleanField(default=True)
    is_staff = models.BooleanField(default=False)

    USERNAME_FIELD = "email"
    objects = MemberManager()
