"""The app's roles, importable without the database packages (the command line's ``--role`` choices
come from here): admin manages users and teams and sees every run; member sees and uploads its
team's runs; viewer sees its team's runs."""

from __future__ import annotations

ROLES = ("admin", "member", "viewer")
"""admin: manages users and teams and sees every run; member: sees and uploads its team's runs;
viewer: sees its team's runs."""
