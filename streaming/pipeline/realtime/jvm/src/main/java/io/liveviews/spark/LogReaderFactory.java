package io.liveviews.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;

/** A micro-batch's range reads and Real-Time Mode's tail reads, by their input partition. */
final class LogReaderFactory implements PartitionReaderFactory {
  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    if (partition instanceof LogTail tail) {
      return new LogTailReader(tail);
    }
    return new LogRangeReader((LogRange) partition);
  }
}
