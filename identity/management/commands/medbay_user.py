"""`manage.py medbay_user add|set-role|disable|enable|list`: accounts without a directory."""

from __future__ import annotations

import getpass
import pwd
import sys

from django.core.management.base import BaseCommand, CommandError

from core.roles import Role
from identity import accounts


def _actor() -> str:
    try:
        return f"medbay_user ({getpass.getuser()})"
    except Exception:  # no login name (a container without a passwd entry)
        return "medbay_user"


class Command(BaseCommand):
    help = "Create users in Medbay's roles, change their roles, disable, enable and list them."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="create a user; prints a generated password")
        add.add_argument("name")
        self._role_argument(add)
        add.add_argument("--unix-user", default="", help="the Unix account jobs run as")
        add.add_argument("--email", default="")
        add.add_argument(
            "--password-file",
            help="read the password from this file's first line ('-': standard input) "
            "instead of generating one",
        )
        role = sub.add_parser("set-role", help="make the user's roles exactly these")
        role.add_argument("name")
        self._role_argument(role)
        role.add_argument("--unix-user", help="also change the Unix account jobs run as")
        for action, what in (("disable", "the user can no longer log in"), ("enable", "undo")):
            one = sub.add_parser(action, help=what)
            one.add_argument("name")
            one.add_argument("--why", default="")
        sub.add_parser("list", help="name, roles, Unix account, active, last log-in")

    @staticmethod
    def _role_argument(parser) -> None:
        parser.add_argument(
            "--role",
            action="append",
            required=True,
            help="researcher, admin or manager; repeat for several",
        )

    def handle(self, *args, **options):
        try:
            getattr(self, "_" + options["action"].replace("-", "_"))(options)
        except accounts.AccountError as error:
            raise CommandError(str(error)) from None

    def _add(self, options) -> None:
        roles = accounts.parse_roles(options["role"])
        given = _read_password(options["password_file"]) if options["password_file"] else None
        user, password = accounts.add_user(
            options["name"],
            roles,
            by=_actor(),
            unix_user=options["unix_user"],
            email=options["email"],
            password=given,
        )
        self.stdout.write(f"Created {user.username} ({', '.join(sorted(roles))}).")
        self._warn_if_unknown_here(options["unix_user"] or user.username, roles)
        if given is None:
            # Printed once, to the terminal of whoever ran the command; never logged.
            self.stdout.write(f"Password: {password}")

    def _warn_if_unknown_here(self, unix_user: str, roles) -> None:
        # Not an error: the portal's host need not know every node's accounts,
        # but on a one-host cluster a typo would only show at the first sbatch.
        if Role.RESEARCHER not in roles:
            return
        try:
            pwd.getpwnam(unix_user)
        except KeyError:
            self.stderr.write(
                f"Warning: this host has no Unix account {unix_user!r}; "
                f"Slurm will refuse jobs unless the cluster's nodes know it."
            )

    def _set_role(self, options) -> None:
        roles = accounts.parse_roles(options["role"])
        user = accounts.set_roles(
            options["name"], roles, by=_actor(), unix_user=options["unix_user"]
        )
        self.stdout.write(f"{user.username} is now {', '.join(sorted(roles))}.")

    def _disable(self, options) -> None:
        name = options["name"]
        user = accounts.get_user(name)
        if not user.is_active:
            self.stdout.write(f"{name} was already disabled.")
            return
        revoked = accounts.disable_user(name, by=_actor(), why=options["why"])
        self.stdout.write(f"Disabled {name}; revoked {revoked} API token(s).")

    def _enable(self, options) -> None:
        name = options["name"]
        changed = accounts.enable_user(name, by=_actor(), why=options["why"])
        self.stdout.write(f"Enabled {name}." if changed else f"{name} was already enabled.")

    def _list(self, options) -> None:
        rows = accounts.list_accounts()
        header = ("NAME", "ROLES", "UNIX", "ACTIVE", "LAST LOG-IN")
        table = [header] + [
            (
                row.username,
                row.roles,
                row.unix_user,
                "yes" if row.active else "no",
                row.last_login.strftime("%Y-%m-%d %H:%M %Z") if row.last_login else "never",
            )
            for row in rows
        ]
        widths = [max(len(line[i]) for line in table) for i in range(len(header))]
        for line in table:
            self.stdout.write(
                "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
            )


def _read_password(path: str) -> str:
    try:
        if path == "-":
            text = sys.stdin.readline()
        else:
            with open(path, encoding="utf-8") as handle:
                text = handle.readline()
    except OSError as error:
        raise CommandError(f"Cannot read the password file: {error.strerror}.") from None
    password = text.rstrip("\r\n")
    if not password:
        raise CommandError("The password file is empty.")
    return password
