package io.liveviews.spark;

import com.google.gson.Gson;
import com.google.gson.JsonObject;
import java.util.List;
import java.util.Map;
import redis.clients.jedis.resps.StreamEntry;

/**
 * Sets aside a log entry the source cannot read as an event, as the Python source does
 * ({@code liveviews.log.deadletters}, whose record this writes and whose script this runs): the
 * pipeline version's hash {@code lv:{d}:deadletters:<version>} gains the record once (HSETNX),
 * and the ordered stream an entry only then. The decision depends on the entry alone, so an
 * epoch read again after a failure makes it again and records nothing twice.
 */
final class DeadLetters {
  static final String PREFIX = "lv:{d}:deadletters:";
  static final String ORDER_STREAM = "lv:{d}:deadletters";
  /** {@code liveviews.log.deadletters._RECORD}. */
  static final String RECORD = String.join("\n",
      "local added = 0",
      "for i = 2, #ARGV, 2 do",
      "  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then",
      "    redis.call('XADD', KEYS[2], '*', 'pipeline', ARGV[1], 'offset', ARGV[i])",
      "    added = added + 1",
      "  end",
      "end",
      "return added");
  /** {@code liveviews.log.deadletters.MAX_FIELD}: characters kept of each of the entry's fields. */
  static final int MAX_FIELD = 65536;
  /** The record's nulls are written, as {@code asdict} writes them. */
  private static final Gson GSON = new Gson().newBuilder().serializeNulls().create();

  private DeadLetters() {}

  /** The record ({@code DeadLetter.to_json}) of {@code entry}, at {@code offset} of the log. */
  private static String json(String version, String offset, StreamEntry entry, String reason) {
    JsonObject event = new JsonObject();
    for (Map.Entry<String, String> field : entry.getFields().entrySet()) {
      String value = field.getValue();
      event.addProperty(field.getKey(),
          value.length() > MAX_FIELD ? value.substring(0, MAX_FIELD) : value);
    }
    JsonObject letter = new JsonObject();
    letter.addProperty("pipeline", version);
    letter.addProperty("offset", offset);
    letter.addProperty("stage", "decode");
    letter.addProperty("error", "cannot decode the entry: " + reason);
    letter.addProperty("traceback", "");
    letter.add("event", event);
    letter.add("batch", null);
    letter.addProperty("recorded_ms", System.currentTimeMillis());
    letter.add("replayed_as", null);
    return GSON.toJson(letter);
  }

  /** Records the entry for pipeline version {@code version}; nothing for a source read for none. */
  static void record(LogStore store, String version, int partition, StreamEntry entry,
      String reason) {
    if (version == null || version.isEmpty()) {
      return;
    }
    String offset = partition + ":" + entry.getID();
    String record = json(version, offset, entry, reason);
    store.read("setting aside log entry " + offset, jedis -> jedis.eval(RECORD,
        List.of(PREFIX + version, ORDER_STREAM), List.of(version, offset, record)));
  }
}
