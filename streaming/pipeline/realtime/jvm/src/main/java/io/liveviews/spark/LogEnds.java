package io.liveviews.spark;

import java.util.ArrayList;
import java.util.List;
import redis.clients.jedis.Response;
import redis.clients.jedis.Transaction;
import redis.clients.jedis.resps.StreamEntry;

/**
 * Where the next micro-batch ends, found on the driver: {@code _next_entries} and
 * {@code _heads} of the Python source. Every partition is read in one MULTI, at one instant,
 * so a source transaction appended in one MULTI is wholly in the read or wholly after it.
 */
final class LogEnds {
  private final LogStore store;

  LogEnds(LogStore store) {
    this.store = store;
  }

  static String stream(int partition) {
    return "lv:log:" + partition;
  }

  /** The XRANGE start just after {@code id}. */
  static String after(String id) {
    return id.equals(LogOffset.BEFORE_FIRST) ? "-" : "(" + id;
  }

  /**
   * Each partition's entries after {@code start}, up to {@code limit} spread over the
   * partitions and no further than {@code bound} (null: the heads), ending where no source
   * transaction is cut in two. When the cap would leave nothing, a transaction holding more
   * than a partition's share of it, the share doubles until the read holds it whole.
   */
  LogOffset next(LogOffset start, long limit, LogOffset bound) {
    int share = (int) Math.min(Integer.MAX_VALUE, Math.max(1, limit / start.partitions()));
    while (true) {
      List<List<StreamEntry>> answers = read(start, share, bound);
      List<List<StreamEntry>> whole = LogTransactions.whole(answers);
      if (any(whole) || !any(answers)) {
        return end(start, whole);
      }
      int cap = share;
      if (answers.stream().allMatch(entries -> entries.size() < cap)) {
        return end(start, answers);  // read to the heads: a transaction the log holds in part
      }
      share = (int) Math.min(Integer.MAX_VALUE, 2L * share);  // one transaction over the cap
    }
  }

  /** Each partition's newest entry, all read at one instant; {@code start}'s where it has none. */
  LogOffset heads(LogOffset start) {
    List<List<StreamEntry>> newest = store.read("reading the log's heads", jedis -> {
      Transaction tx = jedis.multi();
      List<Response<List<StreamEntry>>> replies = new ArrayList<>();
      for (int p = 0; p < start.partitions(); p++) {
        replies.add(tx.xrevrange(stream(p), "+", "-", 1));
      }
      tx.exec();
      return replies.stream().map(Response::get).toList();
    });
    return end(start, newest);
  }

  private List<List<StreamEntry>> read(LogOffset start, int share, LogOffset bound) {
    return store.read("reading the log", jedis -> {
      Transaction tx = jedis.multi();
      List<Response<List<StreamEntry>>> replies = new ArrayList<>();
      for (int p = 0; p < start.partitions(); p++) {
        String last = bound == null ? "+" : bound.id(p);
        replies.add(tx.xrange(stream(p), after(start.id(p)), last, share));
      }
      tx.exec();
      return replies.stream().map(Response::get).toList();
    });
  }

  private static boolean any(List<List<StreamEntry>> answers) {
    return answers.stream().anyMatch(entries -> !entries.isEmpty());
  }

  /** {@code start}, moved to the last entry of each partition that has one in {@code answers}. */
  private static LogOffset end(LogOffset start, List<List<StreamEntry>> answers) {
    String[] ids = start.ids();
    for (int p = 0; p < ids.length; p++) {
      List<StreamEntry> entries = answers.get(p);
      if (!entries.isEmpty()) {
        ids[p] = entries.get(entries.size() - 1).getID().toString();
      }
    }
    return new LogOffset(ids);
  }
}
