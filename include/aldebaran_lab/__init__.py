"""The lab: development-only tools around the platform — reliability campaigns (:mod:`.chaos`), the
local services (:mod:`.services`), the demo (:mod:`.demo`) and the docs generator (:mod:`.docsgen`).

It imports the product (:mod:`aldebaran`) and the capacity package (:mod:`aldebaran_capacity`: load,
receivers), never the reverse, and the image leaves it out (.dockerignore). Its commands (``aldebaran
services``, ``demo``, ``chaos``, ``docs``) are registered by :mod:`.cli` when the package is importable.
"""
