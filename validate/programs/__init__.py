"""Standalone programs that the validation suite copies into a job and runs there.

They run in the user's provisioned environment (torch, maybe TensorFlow and Horovod), not in
hpcprov's: each is a single file using the standard library and the frameworks only, which it
imports lazily according to its arguments. hpcprov reads them as text, e.g.
``importlib.resources.files("hpcprov.validate.programs").joinpath("allreduce.py").read_text()``.
"""
