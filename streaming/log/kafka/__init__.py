"""Apache Kafka as the log, for deployments that outgrow one store: its brokers, run for you
from Kafka's own jars (``broker``) in tests and on one machine; the log's topic (``topic``); an
event as a Kafka record (``records``); and appending batches once (``append``)."""
