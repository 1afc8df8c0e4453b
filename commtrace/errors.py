"""Exit codes and the one exception type the CLI turns into a one-line error."""

EXIT_OK = 0
EXIT_FINDINGS = 1   # `check`: problems found; `run`: the script's own exit code is passed through
EXIT_USAGE = 2      # bad input: nothing usable (missing dir, no traces, bad arguments)


def exit_status(code) -> int:
    """The exit status Python gives a process ended by ``SystemExit(code)``: None 0, an int
    itself, anything else 1 (Python prints it)."""
    if code is None:
        return 0
    return int(code) if isinstance(code, int) else 1


class CommtraceError(Exception):
    """A user-facing error: printed as one line, exit code ``code``."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code


def report(e: CommtraceError) -> int:
    """Print ``e`` as the CLI does (one line on stderr); returns its exit code."""
    import sys
    print(f"commtrace: error: {e}", file=sys.stderr)
    return e.code
