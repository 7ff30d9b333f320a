"""The ``aldebaran`` command: ``main`` (its entry point and subcommands; other packages add theirs by entry
point) and ``explain`` (one alert's story: its trades, its trigger, its deliveries; the Deliveries page shows
the same)."""
