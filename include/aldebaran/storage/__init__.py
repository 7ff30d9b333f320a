"""The object store and what reaches it: ``store`` (the one storage layer: a Store opened by open_store, S3
or ``local``), ``s3access`` (how the bucket is reached), ``connections`` (the product's connections, parsed
without Airflow) and ``quarantine`` (where a stored object that fails its check is set aside)."""
