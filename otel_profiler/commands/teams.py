"""``otel-profiler teams add|remove|list``: the teams of the Profiler app; a run belongs to the team
on its ``ml.team`` resource attribute. Every change goes to the audit log."""

from __future__ import annotations

import argparse
import sys

from cuda_tracer.profile import TraceError

from .users import actor, add_database_args, open_accounts


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("teams", help="add, remove and list the Profiler app's teams",
                              description="Teams of `otel-profiler serve`: a user sees the runs whose ml.team "
                                          "resource attribute is their team.")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True, help="what to do")
    for name, text in (("add", "add a team"), ("remove", "remove a team that has no users left")):
        one = sub.add_parser(name, help=text)
        one.add_argument("name", metavar="NAME")
        add_database_args(one)
    add_database_args(sub.add_parser("list", help="list teams and how many users each has"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..app.auth import accounts

    with open_accounts(args) as db:
        try:
            if args.action == "add":
                accounts.add_team(db, args.name, actor())
                print(f"added team {args.name}", file=sys.stderr)
            elif args.action == "remove":
                accounts.remove_team(db, args.name, actor())
                print(f"removed team {args.name}", file=sys.stderr)
            else:
                for name, count in accounts.list_teams(db):
                    print(f"{name}\t{count} user(s)")
        except accounts.AccountError as exc:
            raise TraceError(args.name, str(exc)) from None
    return 0
