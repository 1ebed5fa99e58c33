package io.liveviews.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * A Real-Time Mode task: the entries of the log partitions {@code partitions} after
 * {@code after} (each partition's id), as they are appended, until the batch's time ends or
 * the positions clients wait for, told on the stream {@code wants} (none when empty), are read;
 * never past the next cut for {@code pipeline} on the stream {@code cuts} ({@link LogCuts}),
 * at which it ends instead. An epoch that the writer of the pipeline version {@code version}
 * started before (a replay after a failure) ends once the log as it was at the task's start is
 * read ({@link LogTailReader}).
 */
record LogTail(String url, int[] partitions, String[] after, String wants, String cuts,
    String pipeline, String version) implements InputPartition {}
