"""The drafting parts of the schedulers (`hpcprov site draft`): one module per scheduler that
can be asked, with its commands, pure parsers of their text, ``discover`` and ``DRAFTING``
(a :class:`hpcprov.schedulers.facts.Drafting`: what the draft asks the scheduler and writes
for it), reporting :mod:`hpcprov.schedulers.facts`' types. A backend names its module
(``discovery``) and loads it only for a draft (``Backend.drafting()``): planning and running
jobs never load it.
"""
