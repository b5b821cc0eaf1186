"""The reference pipelines from a checkout: ``examples.<module>`` is ``intune_flow/examples/<module>.py``.

The code ships inside the package (``intune_flow.examples``, in the wheel too); this
package, which only a checkout has (it is not installed), keeps the references the
project has always documented working from the repository root: ``examples.criteo:criteo_pipeline``
loads the same file as ``intune_flow.examples.criteo:criteo_pipeline`` (as its own module
object under this name).
"""

import intune_flow.examples as _shipped

__path__ = list(_shipped.__path__)
