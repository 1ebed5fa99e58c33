package io.liveviews.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import redis.clients.jedis.resps.StreamEntry;

/**
 * A batch ends between source transactions (change data capture), so that a transaction's
 * changes become visible in the views together: {@code whole_transactions} of the Python
 * source. A transaction's entries are contiguous in each partition (one MULTI appends them)
 * and say how many there are over all partitions ({@code tx_events}).
 */
final class LogTransactions {
  static final String TX = "tx";
  static final String TX_EVENTS = "tx_events";

  private LogTransactions() {}

  /**
   * {@code answers} (each partition's entries, in order) without the transactions they hold
   * only part of, and without what follows such a part in its partition. Cutting a partition
   * can leave another transaction in part, so it repeats until nothing is cut.
   */
  static List<List<StreamEntry>> whole(List<List<StreamEntry>> answers) {
    if (answers.stream().flatMap(List::stream).noneMatch(e -> e.getFields().containsKey(TX))) {
      return answers;  // the usual case: no event from a database's changes in this read
    }
    List<List<StreamEntry>> kept = answers;
    while (true) {
      Map<String, Integer> seen = new HashMap<>();
      Map<String, Integer> size = new HashMap<>();
      for (List<StreamEntry> entries : kept) {
        for (StreamEntry entry : entries) {
          String tx = entry.getFields().get(TX);
          if (tx != null) {
            seen.merge(tx, 1, Integer::sum);
            size.put(tx, Integer.parseInt(entry.getFields().get(TX_EVENTS)));
          }
        }
      }
      Set<String> partial = new HashSet<>();
      seen.forEach((tx, n) -> {
        if (n < size.get(tx)) {
          partial.add(tx);
        }
      });
      if (partial.isEmpty()) {
        return kept;
      }
      List<List<StreamEntry>> cut = new ArrayList<>();
      for (List<StreamEntry> entries : kept) {
        cut.add(before(entries, partial));
      }
      kept = cut;
    }
  }

  /** {@code entries} up to the first one of a transaction in {@code txs}. */
  private static List<StreamEntry> before(List<StreamEntry> entries, Set<String> txs) {
    for (int i = 0; i < entries.size(); i++) {
      if (txs.contains(entries.get(i).getFields().get(TX))) {
        return entries.subList(0, i);
      }
    }
    return entries;
  }
}
