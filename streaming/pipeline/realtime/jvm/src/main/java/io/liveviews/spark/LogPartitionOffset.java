package io.liveviews.spark;

import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;

/**
 * What one Real-Time Mode reader has handed to Spark: for each log partition it owns, the id
 * of the last entry it returned (or read past); its starting id when it returned none.
 */
final class LogPartitionOffset implements PartitionOffset {
  private final TreeMap<Integer, String> ids;

  LogPartitionOffset(Map<Integer, String> ids) {
    this.ids = new TreeMap<>(ids);
  }

  Map<Integer, String> ids() {
    return ids;
  }
}
