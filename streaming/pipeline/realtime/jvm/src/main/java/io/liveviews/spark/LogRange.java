package io.liveviews.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * A micro-batch's read of one log partition: its entries after {@code after} (exclusive) up to
 * {@code end} (inclusive, an entry the batch's planning read), for pipeline version
 * {@code version} (its dead letters; none when empty). Only the store's URL and the range: the
 * connection is opened by the task, on its executor.
 */
record LogRange(String url, int partition, String after, String end, String version)
    implements InputPartition {}
