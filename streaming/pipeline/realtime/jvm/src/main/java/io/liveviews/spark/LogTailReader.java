package io.liveviews.spark;

import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.TaskContext;
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
 *
 * <p>The frontier moves only when an epoch ends, so a client waiting for its own write
 * ({@code reflects()}) would wait for the rest of the epoch. The gateway tells the positions
 * clients wait for on the {@code wants} stream, read in the same XREAD; once this task has
 * handed Spark every wanted entry of its partitions, it answers "no record", which ends its
 * part of the epoch early (Spark's {@code LowLatencyReaderWrap}), and the epoch then ends as
 * its other tasks drain. Wants its epoch already started past are left out, so a new epoch is
 * never ended by a want an earlier one met.
 *
 * <p>A cut for its pipeline ({@link LogCuts}, on the {@code cuts} stream of the same XREAD)
 * that this task has not passed is a stop: no entry past it is handed to Spark in this epoch
 * (those read are read again by the next one, from the returned ids), and once every partition
 * of the task is at the cut, it answers "no record", so that the epoch ends exactly there, as
 * the micro-batch sources end a batch there.
 *
 * <p>After a failure Spark runs the last epoch again, and its writers keep every change until
 * that epoch ends ({@link ChangeTopicWriter}): for a whole interval, nothing would reach a
 * subscriber. So a task that finds it started this epoch before (it marks the writers' set of
 * the epoch, {@link ChangeTopicKeys#attempts}) reads the log's heads as it starts and ends the
 * epoch once it has handed Spark everything up to them, as it does for a client's want: the
 * replay takes the time to read again what the failed attempt read, not an interval.
 */
final class LogTailReader implements SupportsRealTimeRead<InternalRow> {
  static final int READ_COUNT = 500;
  /** The longest XREAD block: short enough that the connection's 2 s timeout never fires. */
  static final long BLOCK_MS = 500;
  /** Wants told this long before the task started count too: told as the last epoch ended. */
  static final long LOOK_BACK_MS = 2_000;
  /** The shortest epoch a want ends: bounds the epochs (and their checkpoints) per second. */
  static final long MIN_EPOCH_MS = 100;
  /** The task's local property that holds its epoch (Spark's MicroBatchExecution.BATCH_ID_KEY). */
  static final String EPOCH_PROPERTY = "streaming.sql.batchId";

  private final LogStore store;
  private final Map<String, Integer> partitionOf = new HashMap<>();
  private final Map<String, StreamEntryID> cursor = new LinkedHashMap<>();
  private final TreeMap<Integer, String> returned = new TreeMap<>();
  private final ArrayDeque<Map.Entry<Integer, StreamEntry>> buffer = new ArrayDeque<>();
  private final String wants;
  private final Map<Integer, StreamEntryID> from = new HashMap<>();
  /** Per partition of this task, the furthest entry a client waits for (or, in an epoch run
   * again, the log's head as it started). */
  private final Map<Integer, StreamEntryID> wanted = new HashMap<>();
  private final String cuts;
  private final String pipeline;
  /** The pipeline version whose dead letters an entry that is not an event goes to. */
  private final String version;
  private final int[] partitions;
  /** Per partition of this task, the next cut for its pipeline: nothing past it this epoch. */
  private Map<Integer, StreamEntryID> stop;
  /** Where this epoch started, per partition of this task: a cut after it can end it. */
  private final Map<Integer, String> start = new HashMap<>();
  private final long started = System.currentTimeMillis();
  private InternalRow row;

  LogTailReader(LogTail tail) {
    store = new LogStore(tail.url());
    for (int i = 0; i < tail.partitions().length; i++) {
      int p = tail.partitions()[i];
      partitionOf.put(LogEnds.stream(p), p);
      cursor.put(LogEnds.stream(p), new StreamEntryID(tail.after()[i]));
      returned.put(p, tail.after()[i]);
      start.put(p, tail.after()[i]);
      from.put(p, new StreamEntryID(tail.after()[i]));
    }
    wants = tail.wants() == null || tail.wants().isEmpty() ? null : tail.wants();
    if (wants != null) {
      cursor.put(wants, new StreamEntryID(Math.max(0, started - LOOK_BACK_MS), 0));
    }
    partitions = tail.partitions().clone();
    if (isReplay(tail.version())) {
      wanted.putAll(heads());
    }
    pipeline = tail.pipeline();
    version = tail.version();
    boolean cutting = tail.cuts() != null && !tail.cuts().isEmpty()
        && pipeline != null && !pipeline.isEmpty();
    cuts = cutting ? tail.cuts() : null;
    if (cuts != null) {
      List<StreamEntry> newest = store.read("reading the cuts",
          jedis -> jedis.xrevrange(cuts, "+", "-", LogCuts.READ));
      stop = LogCuts.next(newest, pipeline, partitions, start);
      cursor.put(cuts, newest.isEmpty() ? new StreamEntryID(0, 0) : newest.get(0).getID());
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
    TaskContext task = TaskContext.get();
    do {
      if (task != null) {
        // A stopped query kills its tasks by flagging them; a blocking read does not notice,
        // and the task would hold its slot until the epoch's time was up.
        task.killTaskIfInterrupted();
      }
      if (wantsMet() && System.currentTimeMillis() - started >= MIN_EPOCH_MS) {
        return RecordStatus.newStatusWithoutArrivalTime(false);
      }
      if (atStop()) {
        return RecordStatus.newStatusWithoutArrivalTime(false);
      }
      while (!buffer.isEmpty()) {
        Map.Entry<Integer, StreamEntry> next = buffer.poll();
        if (pastStop(next.getKey(), next.getValue().getID())) {
          continue;  // read again by the next epoch, which starts at the returned ids
        }
        returned.put(next.getKey(), next.getValue().getID().toString());
        row = LogRows.row(next.getKey(), next.getValue(), store, version);
        if (row != null) {
          return RecordStatus.newStatusWithArrivalTimeMs(next.getValue().getID().getTime());
        }
      }
      long block = Math.min(BLOCK_MS, deadline - System.currentTimeMillis());
      if (wantsMet()) {
        block = Math.min(block, started + MIN_EPOCH_MS - System.currentTimeMillis());
      }
      fill(block);
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
      Integer p = partitionOf.get(stream.getKey());  // null: the wants or the cuts stream
      boolean isCut = stream.getKey().equals(cuts);
      for (StreamEntry entry : stream.getValue()) {
        if (p != null) {
          buffer.add(Map.entry(p, entry));
        } else if (isCut) {
          // A cut after the epoch's start ends it, even where this task has handed everything up
          // to it already; one it has handed entries past cannot end it any more.
          Map<Integer, StreamEntryID> at = LogCuts.ahead(entry, pipeline, partitions, start);
          if (stop == null && at != null && !handedPast(at)) {
            stop = at;
          }
        } else {
          want(entry.getFields());
        }
      }
      if (!stream.getValue().isEmpty()) {
        cursor.put(stream.getKey(), stream.getValue().get(stream.getValue().size() - 1).getID());
      }
    }
  }

  /**
   * Whether this task's epoch ran before: its mark is in the epoch's set of the writers of
   * {@code version} already. A mark whose answer was lost and sent again counts as a replay
   * too, which only ends that epoch early.
   */
  private boolean isReplay(String version) {
    TaskContext task = TaskContext.get();
    String epoch = task == null ? null : task.getLocalProperty(EPOCH_PROPERTY);
    if (version == null || version.isEmpty() || epoch == null) {
      return false;
    }
    String marker = ChangeTopicKeys.attempts(version, Long.parseLong(epoch));
    String member = "reader " + partitions[0];  // a task's partitions are its own
    return store.read("marking the epoch's reader", jedis -> jedis.sadd(marker, member)) == 0;
  }

  /** Each partition's newest entry, or where the epoch starts if it holds none past that. */
  private Map<Integer, StreamEntryID> heads() {
    Map<Integer, StreamEntryID> heads = new HashMap<>();
    for (int p : partitions) {
      List<StreamEntry> newest = store.read("reading the log's heads",
          jedis -> jedis.xrevrange(LogEnds.stream(p), "+", "-", 1));
      StreamEntryID head = newest.isEmpty() ? from.get(p) : newest.get(0).getID();
      heads.put(p, head.compareTo(from.get(p)) > 0 ? head : from.get(p));
    }
    return heads;
  }

  /** A want's positions ({@code <partition>: <entry id>}) of this task's partitions that its
   * epoch did not start past. */
  private void want(Map<String, String> positions) {
    for (Map.Entry<String, String> position : positions.entrySet()) {
      try {
        int p = Integer.parseInt(position.getKey());
        StreamEntryID id = new StreamEntryID(position.getValue());
        if (from.containsKey(p) && id.compareTo(from.get(p)) > 0) {
          wanted.merge(p, id, (a, b) -> a.compareTo(b) >= 0 ? a : b);
        }
      } catch (IllegalArgumentException ignored) {
        // Not a position: a want is a hint, and the epoch ends on time anyway.
      }
    }
  }

  /** Whether this task has handed Spark an entry past {@code at} in one of its partitions. */
  private boolean handedPast(Map<Integer, StreamEntryID> at) {
    for (Map.Entry<Integer, StreamEntryID> cut : at.entrySet()) {
      if (new StreamEntryID(returned.get(cut.getKey())).compareTo(cut.getValue()) > 0) {
        return true;
      }
    }
    return false;
  }

  /** Whether {@code id} of {@code partition} lies past this epoch's stop. */
  private boolean pastStop(int partition, StreamEntryID id) {
    return stop != null && stop.containsKey(partition) && id.compareTo(stop.get(partition)) > 0;
  }

  /** Whether every partition of this task was handed to Spark up to its stop. */
  private boolean atStop() {
    if (stop == null) {
      return false;
    }
    for (Map.Entry<Integer, StreamEntryID> at : stop.entrySet()) {
      if (new StreamEntryID(returned.get(at.getKey())).compareTo(at.getValue()) < 0) {
        return false;
      }
    }
    return true;
  }

  /** Whether some client waits for entries of this task, all of them handed to Spark. */
  private boolean wantsMet() {
    if (wanted.isEmpty()) {
      return false;
    }
    for (Map.Entry<Integer, StreamEntryID> want : wanted.entrySet()) {
      if (new StreamEntryID(returned.get(want.getKey())).compareTo(want.getValue()) < 0) {
        return false;
      }
    }
    return true;
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
