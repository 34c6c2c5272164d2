"""One exception type for everything the user can fix, with the next step spelled out,
and the exit statuses of the `kerncap` command (docs/cli.md)."""

# Exit statuses of `kerncap` (and the `exit_code` of each error type).
EXIT_OK = 0           # success; a validation that passed
EXIT_FAILED = 1       # a verdict of failure: validation FAIL (a check's regression)
EXIT_USAGE = 2        # the command line is wrong (argparse's own status too)
EXIT_CANNOT_RUN = 3   # could not run: damaged input, no GPU, missing tool, disk or permission trouble
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143   # SIGTERM (128 + SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as Ctrl-C raises KeyboardInterrupt: everything
    that cleans up after Ctrl-C (temp files, scratch directories, child processes) does
    after SIGTERM too, and the command ends with one line and EXIT_TERMINATED."""


class KerncapError(Exception):
    """An error the user can act on.

    `message` names the thing (file, kernel, call) that failed; `hint` says what to do
    next. The CLI prints both without a traceback and exits with `exit_code`.
    """

    exit_code = EXIT_CANNOT_RUN

    def __init__(self, message: str, hint: str | None = None, *, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"

    def to_json(self) -> dict:
        """The error as `--json` prints it on stdout."""
        return {"error": {"type": type(self).__name__, "message": self.message, "hint": self.hint,
                          "exit_status": self.exit_code}}


class UsageError(KerncapError):
    """Options or arguments that do not fit together (the command line must change)."""

    exit_code = EXIT_USAGE


class CaptureFormatError(KerncapError):
    """A capture directory that is corrupt, truncated, incomplete or from another format version."""


class NativeUnavailable(KerncapError):
    """The native parts (interposer, replay core) were not built or cannot run here."""


class GpuUnavailable(KerncapError):
    """No CUDA GPU (or no driver) where replay had to run."""


class AddressUnavailable(KerncapError):
    """A captured address range that the replay process could not reserve."""
