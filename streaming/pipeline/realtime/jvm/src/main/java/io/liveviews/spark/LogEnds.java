package io.liveviews.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import redis.clients.jedis.Response;
import redis.clients.jedis.StreamEntryID;
import redis.clients.jedis.Transaction;
import redis.clients.jedis.resps.StreamEntry;

/**
 * Where the next micro-batch ends, found on the driver: {@code _next_entries} and
 * {@code _heads} of the Python source. Every partition is read in one MULTI, at one instant,
 * so a source transaction appended in one MULTI is wholly in the read or wholly after it; and
 * with it the newest cuts ({@link LogCuts}), at whose next one for {@code pipeline} the batch
 * ends.
 */
final class LogEnds {
  private final LogStore store;
  private final String cuts;
  private final String pipeline;

  /** {@code cuts}: the cuts stream, or empty for none. */
  LogEnds(LogStore store, String cuts, String pipeline) {
    this.store = store;
    this.cuts = cuts == null || cuts.isEmpty() || pipeline == null || pipeline.isEmpty()
        ? null : cuts;
    this.pipeline = pipeline;
  }

  /** What one MULTI read: each partition's entries, and the newest cuts (newest first). */
  private record Read(List<List<StreamEntry>> entries, List<StreamEntry> cuts) {}

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
      Read read = read(start, share, bound);
      Map<Integer, StreamEntryID> stop =
          LogCuts.next(read.cuts(), pipeline, LogCuts.all(start), LogCuts.ids(start));
      List<List<StreamEntry>> answers = before(read.entries(), stop);
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

  /**
   * Each partition's newest entry, all read at one instant; {@code start}'s where it has none.
   * With {@code atCuts}, no further than the next cut for the source's pipeline (a batch's end);
   * without, the heads themselves (the bound of a {@code Trigger.AvailableNow} run).
   */
  LogOffset heads(LogOffset start, boolean atCuts) {
    Read newest = store.read("reading the log's heads", jedis -> {
      Transaction tx = jedis.multi();
      List<Response<List<StreamEntry>>> replies = new ArrayList<>();
      for (int p = 0; p < start.partitions(); p++) {
        replies.add(tx.xrevrange(stream(p), "+", "-", 1));
      }
      return executed(tx, replies);
    });
    Map<Integer, StreamEntryID> stop = atCuts
        ? LogCuts.next(newest.cuts(), pipeline, LogCuts.all(start), LogCuts.ids(start)) : null;
    return LogCuts.bounded(end(start, newest.entries()), stop);
  }

  private Read read(LogOffset start, int share, LogOffset bound) {
    return store.read("reading the log", jedis -> {
      Transaction tx = jedis.multi();
      List<Response<List<StreamEntry>>> replies = new ArrayList<>();
      for (int p = 0; p < start.partitions(); p++) {
        String last = bound == null ? "+" : bound.id(p);
        replies.add(tx.xrange(stream(p), after(start.id(p)), last, share));
      }
      return executed(tx, replies);
    });
  }

  /** The transaction run, with the newest cuts read last in it when the source has a pipeline. */
  private Read executed(Transaction tx, List<Response<List<StreamEntry>>> replies) {
    Response<List<StreamEntry>> newest =
        cuts == null ? null : tx.xrevrange(cuts, "+", "-", LogCuts.READ);
    tx.exec();
    List<List<StreamEntry>> entries = replies.stream().map(Response::get).toList();
    return new Read(entries, newest == null ? List.of() : newest.get());
  }

  /** Each partition's entries up to {@code stop} (all of them when null). */
  private static List<List<StreamEntry>> before(
      List<List<StreamEntry>> answers, Map<Integer, StreamEntryID> stop) {
    if (stop == null) {
      return answers;
    }
    List<List<StreamEntry>> kept = new ArrayList<>();
    for (int p = 0; p < answers.size(); p++) {
      StreamEntryID at = stop.get(p);
      kept.add(answers.get(p).stream()
          .filter(e -> at == null || e.getID().compareTo(at) <= 0).toList());
    }
    return kept;
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
