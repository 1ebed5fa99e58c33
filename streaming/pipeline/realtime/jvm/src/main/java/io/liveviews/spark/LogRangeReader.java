package io.liveviews.spark;

import java.util.ArrayDeque;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;
import redis.clients.jedis.resps.StreamEntry;

/** Reads a {@link LogRange}, READ_CHUNK entries at a time. */
final class LogRangeReader implements PartitionReader<InternalRow> {
  static final int READ_CHUNK = 5000;

  private final LogRange range;
  private final LogStore store;
  private final LogBacklog backlog;
  private final ArrayDeque<StreamEntry> chunk = new ArrayDeque<>();
  private String cursor;
  private InternalRow row;

  LogRangeReader(LogRange range) {
    this.range = range;
    this.store = new LogStore(range.url());
    this.backlog = new LogBacklog(range.partition(), range.end());
    this.cursor = range.after();
  }

  @Override
  public boolean next() {
    while (true) {
      while (!chunk.isEmpty()) {
        row = LogRows.row(range.partition(), chunk.poll(), store, range.version());
        if (row != null) {
          return true;
        }
      }
      // The end is an entry's own id, so the read is done exactly when it reaches it; short of
      // it, the store (a replica) does not hold the whole range yet.
      if (cursor.equals(range.end())) {
        return false;
      }
      List<StreamEntry> entries = store.read("reading log partition " + range.partition(),
          jedis -> jedis.xrange(LogEnds.stream(range.partition()), LogEnds.after(cursor),
              range.end(), READ_CHUNK));
      if (entries.isEmpty()) {
        backlog.await();
        continue;
      }
      chunk.addAll(entries);
      cursor = entries.get(entries.size() - 1).getID().toString();
    }
  }

  @Override
  public InternalRow get() {
    return row;
  }

  @Override
  public void close() {
    store.close();
  }
}
