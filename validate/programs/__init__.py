"""Standalone programs that the validation suite copies into a job and runs there.

They run in the user's provisioned environment (torch, maybe TensorFlow and Horovod), not in
hpcprov's: each is a single file using the standard library, the frameworks (imported lazily
according to its arguments) and ``runtime.py``, which the suite always copies beside them:
rank discovery and the result protocol, which hpcprov's judge parses with the same module
(``hpcprov.validate.programs.runtime``). hpcprov reads the programs as text, e.g.
``importlib.resources.files("hpcprov.validate.programs").joinpath("allreduce.py").read_text()``.
"""
