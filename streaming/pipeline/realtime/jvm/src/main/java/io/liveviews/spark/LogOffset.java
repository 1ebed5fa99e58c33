package io.liveviews.spark;

import java.util.Arrays;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * Where a batch ends: for each log partition, the id of the last entry read ("0-0" before the
 * first). Its JSON is exactly what the Python source's {@code json.dumps} writes,
 * {@code {"0": "1732170000000-0", "1": "0-0"}}: Spark compares offsets by their JSON, and a
 * checkpoint written by either source then reads the same to both.
 */
final class LogOffset extends Offset {
  static final String BEFORE_FIRST = "0-0";
  private static final Pattern FIELD =
      Pattern.compile("\\s*\"(\\d+)\"\\s*:\\s*\"(\\d+-\\d+)\"\\s*([,}])");

  private final String[] ids;

  LogOffset(String[] ids) {
    this.ids = ids.clone();
  }

  static LogOffset initial(int partitions) {
    String[] ids = new String[partitions];
    Arrays.fill(ids, BEFORE_FIRST);
    return new LogOffset(ids);
  }

  /**
   * An offset as either source wrote it, with or without spaces; a partition it does not name
   * starts before its first entry, as in the Python source.
   */
  static LogOffset parse(String json, int partitions) {
    String[] ids = initial(partitions).ids;
    String text = json.trim();
    if (!text.startsWith("{")) {
      throw unreadable(json);
    }
    if (text.substring(1).trim().equals("}")) {
      return new LogOffset(ids);
    }
    Matcher field = FIELD.matcher(text);
    int at = 1;
    while (true) {
      if (!field.region(at, text.length()).lookingAt()) {
        throw unreadable(json);
      }
      int p = Integer.parseInt(field.group(1));
      if (p >= partitions) {
        throw new IllegalArgumentException("the checkpoint's offset " + json + " names log partition "
            + p + ", but the log has " + partitions + " partitions (option \"partitions\")");
      }
      ids[p] = field.group(2);
      at = field.end();
      if (field.group(3).equals("}")) {
        if (at != text.length()) {
          throw unreadable(json);
        }
        return new LogOffset(ids);
      }
    }
  }

  private static IllegalArgumentException unreadable(String json) {
    return new IllegalArgumentException(
        "not an offset of the log source: " + json + " (expected {\"0\": \"<ms>-<seq>\", ...})");
  }

  int partitions() {
    return ids.length;
  }

  String id(int partition) {
    return ids[partition];
  }

  String[] ids() {
    return ids.clone();
  }

  @Override
  public String json() {
    StringBuilder out = new StringBuilder("{");
    for (int p = 0; p < ids.length; p++) {
      out.append(p == 0 ? "" : ", ").append('"').append(p).append("\": \"").append(ids[p]).append('"');
    }
    return out.append('}').toString();
  }
}
