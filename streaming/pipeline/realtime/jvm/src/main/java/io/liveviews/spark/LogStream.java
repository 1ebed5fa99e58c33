package io.liveviews.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeMode;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;

/**
 * The log read as a stream, in micro-batches or in Real-Time Mode.
 *
 * <p>In micro-batches the driver finds where each batch ends ({@link LogEnds}) and tasks read
 * each changed partition's range. In Real-Time Mode a batch has no end when it starts:
 * {@code readers} tasks follow the log from the start offset until the batch's time is up, and
 * the batch ends where they stopped ({@link #mergeOffsets}).
 */
final class LogStream
    implements MicroBatchStream, SupportsTriggerAvailableNow, SupportsRealTimeMode {
  private final LogOptions options;
  private final LogStore store;
  private final LogEnds ends;
  /** With Trigger.AvailableNow, the heads when the query started: no batch reads past them. */
  private LogOffset bound;

  LogStream(LogOptions options) {
    this.options = options;
    this.store = new LogStore(options.url());
    this.ends = new LogEnds(store, options.cuts(), options.pipeline());
  }

  @Override
  public Offset initialOffset() {
    return LogOffset.initial(options.partitions());
  }

  @Override
  public Offset deserializeOffset(String json) {
    return LogOffset.parse(json, options.partitions());
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    return ReadLimit.maxRows(options.maxEventsPerBatch());
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    bound = ends.heads(LogOffset.initial(options.partitions()), false);
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException(
        "the log source is read with a read limit: latestOffset(start, limit)");
  }

  /** The start itself when nothing is new: Spark then plans no batch. */
  @Override
  public Offset latestOffset(Offset start, ReadLimit limit) {
    LogOffset from = (LogOffset) start;
    if (limit instanceof ReadMaxRows max) {
      return ends.next(from, max.maxRows(), bound);
    }
    return ends.heads(from, true);
  }

  /** One task per log partition the batch reads. */
  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    LogOffset from = (LogOffset) start;
    LogOffset to = (LogOffset) end;
    List<InputPartition> ranges = new ArrayList<>();
    for (int p = 0; p < from.partitions(); p++) {
      if (!from.id(p).equals(to.id(p))) {
        ranges.add(new LogRange(options.url(), p, from.id(p), to.id(p), options.version()));
      }
    }
    return ranges.toArray(new InputPartition[0]);
  }

  /** {@code readers} tasks, each following some of the log partitions (round robin). */
  @Override
  public InputPartition[] planInputPartitions(Offset start) {
    LogOffset from = (LogOffset) start;
    int readers = Math.min(options.readers(), from.partitions());
    InputPartition[] tails = new InputPartition[readers];
    for (int r = 0; r < readers; r++) {
      int owned = (from.partitions() - r + readers - 1) / readers;
      int[] partitions = new int[owned];
      String[] after = new String[owned];
      for (int i = 0; i < owned; i++) {
        partitions[i] = r + i * readers;
        after[i] = from.id(partitions[i]);
      }
      tails[r] = new LogTail(options.url(), partitions, after, options.wants(), options.cuts(),
          options.pipeline(), options.version());
    }
    return tails;
  }

  /** The readers' offsets together: between them they own every log partition. */
  @Override
  public Offset mergeOffsets(PartitionOffset[] offsets) {
    String[] ids = new String[options.partitions()];
    for (PartitionOffset offset : offsets) {
      for (Map.Entry<Integer, String> id : ((LogPartitionOffset) offset).ids().entrySet()) {
        ids[id.getKey()] = id.getValue();
      }
    }
    for (int p = 0; p < ids.length; p++) {
      if (ids[p] == null) {
        throw new IllegalStateException("no Real-Time Mode reader reported log partition " + p);
      }
    }
    return new LogOffset(ids);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new LogReaderFactory();
  }

  /** The log is the source of truth and is never trimmed by a reader. */
  @Override
  public void commit(Offset end) {}

  @Override
  public void stop() {
    store.close();
  }
}
