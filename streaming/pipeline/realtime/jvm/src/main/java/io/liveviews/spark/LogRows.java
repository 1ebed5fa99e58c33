package io.liveviews.spark;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import redis.clients.jedis.resps.StreamEntry;

/** Log entries as rows of {@link LogSource#SCHEMA} ({@code liveviews.log.events}' fields). */
final class LogRows {
  private static final Logger LOG = LoggerFactory.getLogger(LogRows.class);
  private static final int WARNED_KEPT = 10_000;
  /** The entries already warned about, so a batch read again warns no second time. */
  private static final Set<String> WARNED = Collections.newSetFromMap(
      Collections.synchronizedMap(new LinkedHashMap<>() {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Boolean> eldest) {
          return size() > WARNED_KEPT;
        }
      }));

  private LogRows() {}

  /**
   * The row of an entry of log partition {@code partition}; null for an entry that is not an
   * event (a field missing, a time that is not milliseconds), which is read past with a
   * warning: a reader that stopped at it would never get further.
   */
  static InternalRow row(int partition, StreamEntry entry) {
    Map<String, String> fields = entry.getFields();
    String type = fields.get("type");
    String key = fields.get("key");
    String time = fields.get("time");
    String payload = fields.get("payload");
    String id = entry.getID().toString();
    if (type == null || key == null || time == null || payload == null) {
      skip(partition, id, "it lacks one of the fields type, key, time and payload");
      return null;
    }
    long timeMs;
    try {
      timeMs = digits(time) ? Long.parseLong(time) : -1;
    } catch (NumberFormatException e) {
      timeMs = -1;
    }
    if (timeMs < 0) {
      skip(partition, id, "its time '" + time + "' is not a number of milliseconds");
      return null;
    }
    return new GenericInternalRow(new Object[] {
        partition, UTF8String.fromString(id), UTF8String.fromString(type),
        UTF8String.fromString(key), UTF8String.fromString(payload), timeMs, entry.getID().getTime()
    });
  }

  private static boolean digits(String text) {
    return !text.isEmpty() && text.chars().allMatch(c -> c >= '0' && c <= '9');
  }

  private static void skip(int partition, String id, String reason) {
    if (WARNED.add(partition + ":" + id)) {
      LOG.warn("skipping log entry {} of partition {}: {}", id, partition, reason);
    }
  }
}
