"""``otel-profiler users add|remove|role|token|revoke|list``: who may use the Profiler app (``serve``)
and at which role; every grant and removal goes to the audit log."""

from __future__ import annotations

import argparse
import getpass
import sys

from cuda_tracer.profile import TraceError

from ..app.auth.roles import ROLES


def add_database_args(parser: argparse.ArgumentParser) -> None:
    """``--store`` (its default SQLite database) or ``--database URL`` (e.g. PostgreSQL)."""
    parser.add_argument("--store", help="the profile store (its database is STORE/.otel-profiler-app/app.db)")
    parser.add_argument("--database", metavar="URL",
                        help="a database URL instead of the store's, e.g. postgresql+psycopg://HOST/DB")


def open_accounts(args: argparse.Namespace):
    """A session on the database the arguments name; bad arguments raise ``TraceError``."""
    if not args.store and not args.database:
        raise TraceError("--store", "give the profile store (--store STORE) or a database URL (--database URL)")
    try:
        from ..app.storage.database import DatabaseError, open_database
    except ImportError as exc:
        raise TraceError("otel-profiler[app]",
                         f"not installed ({exc}): pip install -e '.[app]' in the otel-profiler clone") from None
    try:
        return open_database(args.store, args.database)()
    except DatabaseError as exc:
        raise TraceError(args.database or args.store, str(exc).split(": ", 1)[-1]) from None


def actor() -> str:
    """Who made a change from the command line, for the audit log."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("users", help="grant, change and remove access to the Profiler app",
                              description="Users of `otel-profiler serve`: each belongs to one team and has one "
                                          "role (admin: manages users and sees every run; member and viewer: "
                                          "see their team's runs). Every change is in the audit log.")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True, help="what to do")
    add = sub.add_parser("add", help="grant a user access (password read from standard input)")
    add.add_argument("name", metavar="NAME")
    add.add_argument("--team", required=True, help="the team whose runs the user sees")
    add.add_argument("--role", required=True, choices=ROLES)
    add.add_argument("--no-password", action="store_true",
                     help="no password: the user cannot sign in on the web, only use API tokens")
    role = sub.add_parser("role", help="change a user's role")
    role.add_argument("name", metavar="NAME")
    role.add_argument("--role", required=True, choices=ROLES)
    for name, text in (("remove", "remove a user: their sessions and tokens stop working at once"),
                       ("token", "print one new API token for the user on standard output"),
                       ("revoke", "revoke every API token of the user")):
        one = sub.add_parser(name, help=text)
        one.add_argument("name", metavar="NAME")
    listing = sub.add_parser("list", help="list users with their team and role")
    for action in (add, role, listing, *(sub.choices[n] for n in ("remove", "token", "revoke"))):
        add_database_args(action)
    p.set_defaults(func=run)


def read_password(name: str) -> str:
    """The password from standard input: asked twice on a terminal, else its first line."""
    if sys.stdin.isatty():
        first = getpass.getpass(f"password for {name}: ")
        if first != getpass.getpass("again: "):
            raise TraceError("password", "the two passwords differ")
        password = first
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if len(password) < 8:
        raise TraceError("password", "at least 8 characters (read from standard input)")
    return password


def run(args: argparse.Namespace) -> int:
    from ..app.auth import accounts

    password = read_password(args.name) if args.action == "add" and not args.no_password else None
    with open_accounts(args) as db:
        try:
            if args.action == "add":
                accounts.add_user(db, args.name, args.team, args.role, password, actor())
                print(f"added {args.name} ({args.team}, {args.role})", file=sys.stderr)
            elif args.action == "role":
                accounts.set_role(db, args.name, args.role, actor())
                print(f"{args.name} is now {args.role}", file=sys.stderr)
            elif args.action == "remove":
                accounts.remove_user(db, args.name, actor())
                print(f"removed {args.name}", file=sys.stderr)
            elif args.action == "token":
                print(accounts.issue_token(db, args.name, actor()))
            elif args.action == "revoke":
                print(f"revoked {accounts.revoke_tokens(db, args.name, actor())} token(s) of {args.name}",
                      file=sys.stderr)
            else:
                for name, team, role, has_password in accounts.list_users(db):
                    print(f"{name}\t{team}\t{role}\t{'password' if has_password else 'tokens only'}")
        except accounts.AccountError as exc:
            raise TraceError(args.name if hasattr(args, "name") else "users", str(exc)) from None
    return 0
