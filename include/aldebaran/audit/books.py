# Kept until engine.py's import moves (and copart.py's, plans.py's): the store lives in aldebaran.audit.state.
from aldebaran.audit.state.files import files_for  # noqa: F401
from aldebaran.audit.state.store import Config, Outcome, ShardStore  # noqa: F401
