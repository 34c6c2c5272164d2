"""The reproducer on disk and its storage: the capture format reader, the workspace,
the shared chunk store, pack files, `info`. No GPU, no app, no compiler here."""
