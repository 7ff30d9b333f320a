"""``python -m aldebaran_lab.receivers serve ...``: see :mod:`aldebaran_lab.receivers.process`."""

from aldebaran_lab.receivers.process import main

main()
