"""hpcprov: site profiles, provisioning, launching and validation of distributed DL on HPC."""

__version__ = "0.1.0"
