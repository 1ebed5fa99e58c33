package io.liveviews.spark;

/**
 * Waits, a little longer each time, for the store to hold a log partition up to a batch's
 * end (a replica behind its primary); after OUTAGE_MS the batch fails, saying so, and Spark
 * tries it again. The Python source's {@code Backlog}.
 */
final class LogBacklog {
  private final int partition;
  private final String end;
  private long pause = 10;
  private long deadline = -1;

  LogBacklog(int partition, String end) {
    this.partition = partition;
    this.end = end;
  }

  void await() {
    long now = System.currentTimeMillis();
    if (deadline < 0) {
      deadline = now + LogStore.OUTAGE_MS;
    } else if (now > deadline) {
      throw new IllegalStateException("log partition " + partition + " holds no entry " + end
          + " after " + LogStore.OUTAGE_MS / 1000 + " s, though the batch was planned up to it:"
          + " is a replica of the store cluster far behind its primary, or did a failover lose"
          + " acknowledged entries?");
    }
    LogStore.sleep(pause);
    pause = Math.min(500, pause * 2);
  }
}
