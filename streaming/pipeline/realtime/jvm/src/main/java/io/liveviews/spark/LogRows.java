package io.liveviews.spark;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
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

  /** {@code liveviews.log.events.MAX_EVENT_TIME_MS}: 9999-12-31T23:59:59.999Z. */
  static final long MAX_EVENT_TIME_MS = 253402300799999L;
  private static final String[] FIELDS = {"type", "key", "time", "payload"};

  /**
   * The row of an entry of log partition {@code partition}; null for an entry that is not an
   * event (a field missing, a time that is not milliseconds), which is read past with a
   * warning and set aside as a dead letter of pipeline version {@code version} (none when
   * empty): a reader that stopped at it would never get further. Unlike the Python source's
   * screen, a payload is not checked against its type's schema here.
   */
  static InternalRow row(int partition, StreamEntry entry, LogStore store, String version) {
    Map<String, String> fields = entry.getFields();
    String type = fields.get("type");
    String key = fields.get("key");
    String time = fields.get("time");
    String payload = fields.get("payload");
    List<String> missing = new ArrayList<>();
    for (String name : FIELDS) {
      if (fields.get(name) == null) {
        missing.add(name);
      }
    }
    if (!missing.isEmpty()) {
      skip(partition, entry, "the entry has no " + String.join(", ", missing) + " field.", store,
          version);
      return null;
    }
    long timeMs;
    try {
      timeMs = digits(time) ? Long.parseLong(time) : -1;
    } catch (NumberFormatException e) {
      timeMs = Long.MAX_VALUE;  // all digits, past a long
    }
    if (timeMs < 0) {
      String shown = time.length() > 40 ? time.substring(0, 40) : time;
      skip(partition, entry, "time '" + shown + "' is not milliseconds since 1970.", store,
          version);
      return null;
    }
    if (timeMs > MAX_EVENT_TIME_MS) {
      skip(partition, entry, "time is after year 9999.", store, version);
      return null;
    }
    return new GenericInternalRow(new Object[] {
        partition, UTF8String.fromString(entry.getID().toString()), UTF8String.fromString(type),
        UTF8String.fromString(key), UTF8String.fromString(payload), timeMs, entry.getID().getTime()
    });
  }

  private static boolean digits(String text) {
    return !text.isEmpty() && text.chars().allMatch(c -> c >= '0' && c <= '9');
  }

  private static void skip(int partition, StreamEntry entry, String reason, LogStore store,
      String version) {
    if (WARNED.add(partition + ":" + entry.getID())) {
      LOG.warn("skipping log entry {} of partition {}: {}", entry.getID(), partition, reason);
    }
    DeadLetters.record(store, version, partition, entry, reason);
  }
}
