"""What `hpcprov site draft` learns from a scheduler: one module per scheduler that can be
asked (its commands, pure parsers of their text, and ``discover``), and the facts they
report (:mod:`facts`). Imported only by a draft: planning and running jobs never load it.
"""
