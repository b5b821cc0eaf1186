"""Reference pipelines and the small DLRM used by the demos (importable as ``examples.<module>:<attr>``)."""
