"""The platform's Kafka clients: the connection (conn), its Java-client options for Spark (java), the
producer and consumer helpers (io), administration (admin) and every client's failover keys (failover)."""
