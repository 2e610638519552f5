"""Admission schedulers: which waiting call an engine admits next (see `base.py`)."""
