package io.liveviews.spark;

import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead;
import redis.clients.jedis.StreamEntryID;
import redis.clients.jedis.params.XReadParams;
import redis.clients.jedis.resps.StreamEntry;

/**
 * Reads a {@link LogTail} in Real-Time Mode: one blocking XREAD over all its partitions waits
 * for the next entries, which are handed to Spark one by one as it asks.
 *
 * <p>Entries are read ahead ({@code cursor}) but the offset Spark records is what was
 * returned ({@code returned}): what is still buffered when the batch's time ends is read again
 * by the next batch, which starts at the returned ids.
 */
final class LogTailReader implements SupportsRealTimeRead<InternalRow> {
  static final int READ_COUNT = 500;
  /** The longest XREAD block: short enough that the connection's 2 s timeout never fires. */
  static final long BLOCK_MS = 500;

  private final LogStore store;
  private final Map<String, Integer> partitionOf = new HashMap<>();
  private final Map<String, StreamEntryID> cursor = new LinkedHashMap<>();
  private final TreeMap<Integer, String> returned = new TreeMap<>();
  private final ArrayDeque<Map.Entry<Integer, StreamEntry>> buffer = new ArrayDeque<>();
  private InternalRow row;

  LogTailReader(LogTail tail) {
    store = new LogStore(tail.url());
    for (int i = 0; i < tail.partitions().length; i++) {
      int p = tail.partitions()[i];
      partitionOf.put(LogEnds.stream(p), p);
      cursor.put(LogEnds.stream(p), new StreamEntryID(tail.after()[i]));
      returned.put(p, tail.after()[i]);
    }
  }

  /**
   * The next entry, waiting for one up to {@code timeoutMs}, the time left in the batch: no
   * record ends this task's part of the batch, so it is answered only when the time is up.
   * The arrival time is the entry's ingestion time, the millisecond part of its id.
   */
  @Override
  public RecordStatus nextWithTimeout(Long timeoutMs) {
    long deadline = System.currentTimeMillis() + timeoutMs;
    do {
      while (!buffer.isEmpty()) {
        Map.Entry<Integer, StreamEntry> next = buffer.poll();
        returned.put(next.getKey(), next.getValue().getID().toString());
        row = LogRows.row(next.getKey(), next.getValue());
        if (row != null) {
          return RecordStatus.newStatusWithArrivalTimeMs(next.getValue().getID().getTime());
        }
      }
      fill(Math.min(BLOCK_MS, deadline - System.currentTimeMillis()));
    } while (!buffer.isEmpty() || System.currentTimeMillis() < deadline);
    return RecordStatus.newStatusWithoutArrivalTime(false);
  }

  /** Whatever the partitions hold now, without waiting. */
  @Override
  public boolean next() {
    return nextWithTimeout(0L).hasRecord();
  }

  /** One XREAD of the next entries, blocking up to {@code blockMs} (none below 1 ms). */
  private void fill(long blockMs) {
    XReadParams params = XReadParams.xReadParams().count(READ_COUNT);
    if (blockMs >= 1) {
      params.block((int) blockMs);  // never BLOCK 0, which waits for ever
    }
    List<Map.Entry<String, List<StreamEntry>>> read =
        store.read("reading the log as it grows", jedis -> jedis.xread(params, cursor));
    if (read == null) {
      return;  // nothing arrived in the time
    }
    for (Map.Entry<String, List<StreamEntry>> stream : read) {
      int p = partitionOf.get(stream.getKey());
      for (StreamEntry entry : stream.getValue()) {
        buffer.add(Map.entry(p, entry));
      }
      if (!stream.getValue().isEmpty()) {
        cursor.put(stream.getKey(), stream.getValue().get(stream.getValue().size() - 1).getID());
      }
    }
  }

  @Override
  public InternalRow get() {
    return row;
  }

  @Override
  public PartitionOffset getOffset() {
    return new LogPartitionOffset(returned);
  }

  @Override
  public void close() {
    store.close();
  }
}
