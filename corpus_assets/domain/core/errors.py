"""The base of every error the domain raises on purpose.

``except CorpusError`` catches what corpus refuses or cannot do (bad configuration, hostile keys,
integrity failures, conflicts, refused deletion requests ...) and lets programming errors through.
Each error keeps its standard base too (``ValueError`` for bad input, ``RuntimeError`` for a state
that went wrong), so callers that catch those keep working.
"""


class CorpusError(Exception):
    """Something corpus refused or could not do; the message names the file, field or object."""
