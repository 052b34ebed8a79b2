"""The test process's password hasher: Django's PBKDF2-SHA256 at 1,000 rounds instead of
1,000,000 (about 0.3 s a user on these machines; suites make hundreds of users). The algorithm
and the hash's format are Django's own, so a process a test starts with the stock hashers
(daphne logging a browser in) checks these hashes too: the rounds are read from each hash."""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class FewRoundsPBKDF2(PBKDF2PasswordHasher):
    iterations = 1_000
