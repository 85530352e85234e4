"""The layer contract: the registry of every stored layer (registry.py) and the one decision record
every stage writes (decisions.py)."""
