"""The `kerncap` subcommands, one module each (`register(subparsers)`, a handler that
returns the exit status); `kerncap.cli.COMMANDS` lists them. They use `kerncap.api`."""
