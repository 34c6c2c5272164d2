"""One exception type for everything the user can fix, with the next step spelled out."""


class KerncapError(Exception):
    """An error the user can act on.

    `message` names the thing (file, kernel, call) that failed; `hint` says what to do
    next. The CLI prints both without a traceback and exits with `exit_code`.
    """

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, *, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class CaptureFormatError(KerncapError):
    """A capture directory that is corrupt, truncated, incomplete or from another format version."""


class NativeUnavailable(KerncapError):
    """The native parts (interposer, replay core) were not built or cannot run here."""


class GpuUnavailable(KerncapError):
    """No CUDA GPU (or no driver) where replay had to run."""


class AddressUnavailable(KerncapError):
    """A captured address range that the replay process could not reserve."""
