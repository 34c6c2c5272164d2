"""The `kerncap` subcommands, one module each (`register(subparsers)`, a handler that
returns the exit status); `kerncap.cli.commands()` lists them. They use `kerncap.api`."""
