"""A tf.data iterator that another thread can cancel: ``next()`` runs the same
``IteratorGetNext`` op as ``iter(ds)`` does eagerly, under a cancellation manager, so a probe
that gives up on a pipeline that never yields (a filter that keeps nothing, on a repeated
input) stops it instead of leaving it running on the CPUs beside training."""

from __future__ import annotations

from .. import bounded


class CancellableIterator:
    """``iter(ds)`` plus :meth:`cancel`; :attr:`owned` is the plain iterator (for
    ``tf.data.experimental.get_model_proto``)."""

    def __init__(self, ds):
        from tensorflow.python.eager import cancellation, context

        self.owned = iter(ds)
        self._manager = cancellation.CancellationManager()
        self._context = context.context()
        self._outputs = len(self.owned._flat_output_types)
        self._attrs = ("output_types", self.owned._flat_output_types,
                       "output_shapes", self.owned._flat_output_shapes)
        self._spec = self.owned._element_spec
        bounded.cancellable(self)

    def __iter__(self):
        return self

    def __next__(self):
        from tensorflow.python.data.util import structure
        from tensorflow.python.eager import context, execute
        from tensorflow.python.framework import errors

        try:
            with context.execution_mode(context.SYNC):
                flat = execute.execute_with_cancellation(
                    "IteratorGetNext", self._outputs, [self.owned._iterator_resource],
                    self._attrs, self._context, self._manager)
        except errors.OutOfRangeError:
            raise StopIteration from None
        return structure.from_compatible_tensor_list(self._spec, flat)

    def cancel(self) -> None:
        """Make a ``next()`` blocked in another thread (and every later one) raise
        ``CancelledError``; the pipeline's threads stop."""
        self._manager.start_cancel()


def iterate(ds):
    """A :class:`CancellableIterator` over ``ds``; the plain iterator where this TensorFlow
    lacks what it reads."""
    try:
        return CancellableIterator(ds)
    except (ImportError, AttributeError):
        return iter(ds)
