"""Errors intune_flow raises. Every message names the problem and the fix."""


class IntuneError(Exception):
    """Base class of every error intune_flow raises on purpose."""


class ConfigurationError(IntuneError):
    """Something the caller wrote is wrong: retrying cannot fix it (Airflow fails such a task
    at once, whatever its ``retries``). Every surface raises these before any tuning."""


class OptionsError(ConfigurationError, ValueError):
    """A tuning argument is missing, malformed or out of range (:class:`~intune_flow.options.TuneOptions`)."""


class PipelineError(ConfigurationError):
    """The pipeline factory could not be loaded, built or iterated."""


class FactoryError(PipelineError):
    """The factory is written or called so that no build can succeed (it returns no dataset,
    it cannot be called with the knobs and its arguments): ``tune()`` raises it rather than
    fall back to defaults that would fail the same way."""


class KnobError(ConfigurationError):
    """A knob declaration or a config is invalid."""


class CacheError(IntuneError):
    """A cache URI or backend is unusable."""


class TuningError(IntuneError):
    """Tuning failed and strict mode asked for the failure to propagate."""


def near_misses(names, known, cutoff: float = 0.6) -> dict[str, str]:
    """Each of ``names`` that is not in ``known`` but close to one of it: name -> that one."""
    import difflib

    known = list(known)
    close = {n: difflib.get_close_matches(n, known, n=1, cutoff=cutoff)
             for n in names if n not in known}
    return {n: c[0] for n, c in close.items() if c}


def did_you_mean(names, known) -> str:
    """`` (did you mean 'a' -> 'b'?)`` for the near misses among ``names``; "" for none."""
    hints = [f"{n!r} -> {m!r}" for n, m in near_misses(names, known).items()]
    return f" (did you mean {', '.join(hints)}?)" if hints else ""


def not_taken(where: str, unknown, known, *, what: str = "arguments", otherwise: str = "") -> str:
    """The message for arguments ``where`` does not take: each of ``unknown`` named, the near
    miss among ``known`` (else ``otherwise``), and the ``what`` it takes."""
    unknown = sorted(unknown)
    hint = did_you_mean(unknown, known) or otherwise
    return (f"{where} does not take {', '.join(map(repr, unknown))}{hint}; its {what} are "
            f"{', '.join(known)}")


def describe_error(exc: BaseException, limit: int = 600) -> str:
    """A one-line summary of ``exc`` for logs and fallback reasons, at most ``limit`` characters.

    Our own errors already read as sentences; others get their type name in front.
    """
    text = " ".join(_without_traceback(str(exc)).split()) or type(exc).__name__
    text = text if isinstance(exc, IntuneError) else f"{type(exc).__name__}: {text}"
    return text if len(text) <= limit else text[:limit - 3] + "..."


_TRACEBACK = "Traceback (most recent call last):"


def _without_traceback(text: str) -> str:
    """An error text without the Python traceback some frameworks embed in theirs.

    TensorFlow puts a ``py_function``'s whole traceback, between graph-node names, into
    its message: ``{{function_node ...}} RuntimeError: x Traceback ... RuntimeError: x [[...]]``.
    What a reader needs is the exception line; the traceback is in the logs.
    """
    import re

    text = re.sub(r"\{\{function_node [^}]*\}\}|\[\[\{\{node [^}]*\}\}\]\]", " ", text)
    if _TRACEBACK not in text:
        return text
    head, _, tail = text.partition(_TRACEBACK)
    raised = [line.strip() for line in tail.splitlines()
              if re.match(r"\s*[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b", line)]
    last = raised[-1] if raised else ""
    head = head.strip()
    return head if not last or last in head else f"{head} ({last})".strip()


class WorkerPoolError(IntuneError):
    """A worker pool (tf.data service workers: local processes or Ray actors) could not start
    its workers, lost them, or its engine (Ray) is missing or unreachable."""
