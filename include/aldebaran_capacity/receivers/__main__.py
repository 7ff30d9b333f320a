"""``python -m aldebaran_capacity.receivers serve ...``: see :mod:`aldebaran_capacity.receivers.process`."""

from aldebaran_capacity.receivers.process import main

main()
