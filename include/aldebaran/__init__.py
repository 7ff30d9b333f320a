"""Aldebaran: a streaming trade-audit platform.

Kafka carries trades in and alerts out; a Spark Structured Streaming auditor keeps per-order books;
alerts are delivered to every configured channel exactly once through keyed delivery records in
S3/MinIO; Airflow supervises and operates the whole.
"""

__version__ = "0.1.0"
