"""Old name of :mod:`aldebaran.storage` (the one storage layer); kept while importers move over."""

from aldebaran.storage import ObjectStore, S3Store, StoredObject, safe_segment  # noqa: F401
