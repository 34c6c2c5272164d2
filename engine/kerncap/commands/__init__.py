"""The `kerncap` subcommands, one module each (`register(subparsers)`, a handler that
returns the exit status), and the verbs on an open reproducer that kerncap.frontends.verbs
declares, rendered by `verb`; `kerncap.cli.commands()` lists them. They use `kerncap.api`."""
