package io.liveviews.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import redis.clients.jedis.StreamEntryID;
import redis.clients.jedis.resps.StreamEntry;

/**
 * Cuts ({@code liveviews.changes.cuts}): log positions at which every source of the pipelines a
 * cut names ends a batch, so that the views of a group written by several pipelines are known
 * together there. A cut's fields are {@code pipelines} (comma-separated) and, per log partition,
 * the entry id the batch ends at. The rule is the Python source's {@code next_cut}: the oldest
 * cut for the pipeline that a batch from {@code start} has not passed.
 */
final class LogCuts {
  static final String PIPELINES = "pipelines";
  /** Only the newest cuts matter: {@code CUTS_READ} of the Python side. */
  static final int READ = 16;

  private LogCuts() {}

  /** Whether {@code cut} names {@code pipeline}. */
  static boolean names(StreamEntry cut, String pipeline) {
    String pipelines = cut.getFields().get(PIPELINES);
    if (pipelines == null || pipeline == null || pipeline.isEmpty()) {
      return false;
    }
    for (String name : pipelines.split(",")) {
      if (name.equals(pipeline)) {
        return true;
      }
    }
    return false;
  }

  /** The cut's position in {@code partition} ("0-0" when it names none). */
  static StreamEntryID at(StreamEntry cut, int partition) {
    String id = cut.getFields().get(Integer.toString(partition));
    return new StreamEntryID(id == null ? LogOffset.BEFORE_FIRST : id);
  }

  /**
   * The positions ({@code partition -> id}) of the oldest of {@code newestFirst} (an XREVRANGE)
   * for {@code pipeline} that {@code start} has not passed in {@code partitions}: at or after it
   * in each, after it in one. Null when there is none.
   */
  static Map<Integer, StreamEntryID> next(
      List<StreamEntry> newestFirst, String pipeline, int[] partitions, Map<Integer, String> start) {
    List<StreamEntry> oldestFirst = new ArrayList<>(newestFirst);
    java.util.Collections.reverse(oldestFirst);
    for (StreamEntry cut : oldestFirst) {
      Map<Integer, StreamEntryID> stop = ahead(cut, pipeline, partitions, start);
      if (stop != null) {
        return stop;
      }
    }
    return null;
  }

  /** {@code cut}'s positions if it is for {@code pipeline} and ahead of {@code start}. */
  static Map<Integer, StreamEntryID> ahead(
      StreamEntry cut, String pipeline, int[] partitions, Map<Integer, String> start) {
    if (!names(cut, pipeline)) {
      return null;
    }
    Map<Integer, StreamEntryID> stop = new HashMap<>();
    boolean beyond = false;
    for (int p : partitions) {
      StreamEntryID at = at(cut, p);
      int order = at.compareTo(new StreamEntryID(start.get(p)));
      if (order < 0) {
        return null;  // passed already in this partition
      }
      beyond |= order > 0;
      stop.put(p, at);
    }
    return beyond ? stop : null;
  }

  /** {@code end} brought back to {@code stop} wherever it reads past it. */
  static LogOffset bounded(LogOffset end, Map<Integer, StreamEntryID> stop) {
    if (stop == null) {
      return end;
    }
    String[] ids = end.ids();
    for (Map.Entry<Integer, StreamEntryID> at : stop.entrySet()) {
      if (new StreamEntryID(ids[at.getKey()]).compareTo(at.getValue()) > 0) {
        ids[at.getKey()] = at.getValue().toString();
      }
    }
    return new LogOffset(ids);
  }

  /** Every partition of {@code start}, as {@code next} takes them. */
  static int[] all(LogOffset start) {
    int[] partitions = new int[start.partitions()];
    for (int p = 0; p < partitions.length; p++) {
      partitions[p] = p;
    }
    return partitions;
  }

  static Map<Integer, String> ids(LogOffset offset) {
    Map<Integer, String> ids = new HashMap<>();
    for (int p = 0; p < offset.partitions(); p++) {
      ids.put(p, offset.id(p));
    }
    return ids;
  }
}
