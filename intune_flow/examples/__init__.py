"""Reference pipelines and the small DLRM used by the demos and benchmarks.

Installed with intune_flow, so their references work wherever it is installed:
``"intune_flow.examples.criteo:criteo_pipeline"``, ``"intune_flow.examples.criteo_s3:..."``.
In a checkout of the project, the top-level package ``examples`` (``examples/__init__.py``)
is an alias whose modules are these files: ``"examples.criteo:criteo_pipeline"`` is the
same factory. Importing this package imports neither TensorFlow nor torch; each module
imports the framework it uses.
"""
