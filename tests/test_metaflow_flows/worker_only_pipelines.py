"""A pipeline module whose source defines the factory but which fails to import here, as a
module whose dependency exists only where the flow was written: the flow builds, the task
meets a configuration error."""

import no_such_dependency_on_this_worker  # noqa: F401


def pipeline(knobs):
    raise AssertionError("never reached")
