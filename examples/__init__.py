"""Reference pipelines and the small DLRM used by the demos and benchmarks.

This folder is also the package ``intune_flow.examples`` (``intune_flow/examples`` is a link
to it), so it ships in the wheel: ``"intune_flow.examples.criteo:criteo_pipeline"`` works
wherever intune_flow is installed, and ``"examples.criteo:criteo_pipeline"`` from a checkout
(the same file, imported under either name). Importing this package imports neither
TensorFlow nor torch; each module imports the framework it uses.
"""
