"""The open reproducer: a session owns a reproducer's (or a set's) resident replay server
and compile worker and runs the edit loop over them — baseline, build (recompile →
interleaved timing → validation → History row), validate, compare, replay, inspect (ncu,
sanitizer) — writing the variant history (kerncap.reproducer.history). The workbench,
the CLI's commands, the MCP tools and check/sweep all go through it (docs/architecture.md),
so a variant an agent builds lands in the same history a person sees."""
