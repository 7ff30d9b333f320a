"""The audit: the input contract (``parse``), the rules and their findings, the pure book step, book state
(``state/``), the Spark job (``sparkjob/``) and the reference model the tests hold it to."""
